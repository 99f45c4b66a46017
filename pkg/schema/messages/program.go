package messages

import (
	"encoding/json"
	"strings"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/bashrun"
)

// The bash and text editor calls of code_execution_20250825 and later run as Python programs in
// the request's container (see package bashrun), so that the container's isolation, limits,
// working directory and /mnt/data apply to them as to Python code.

// The program's bounds (see bashrun).
const (
	resultBudget  = bashrun.ResultBudget
	bashOutputMax = bashrun.BashOutputMax
)

// marker is the prefix of the result line of the call id, under the exchange's key.
func marker(key []byte, id string) string { return bashrun.Marker(key, id) }

// program is the Python code that performs the bash or text editor call c and prints its
// result after mark.
func program(c Call, mark string) string {
	if c.Kind == Editor {
		in := map[string]any{"command": c.Command, "path": c.Path, "file_text": c.FileText, "old_str": c.OldStr, "new_str": c.NewStr}
		if c.ViewRange != nil {
			in["view_range"] = c.ViewRange[:]
		}
		return bashrun.Program(bashrun.OpEditor, in, mark)
	}
	return bashrun.Program(bashrun.OpBash, map[string]any{"command": c.Code}, mark)
}

// programResult reads the result the program of a call of kind k printed after mark in out,
// the run's output, and reports whether it found one.
func programResult(k Kind, mark, out string) (Result, bool) {
	line, ok := bashrun.Line(mark, out)
	if !ok {
		return Result{}, false
	}
	// The texts are base64, which encoding/json decodes into []byte.
	var p struct {
		K     string `json:"k"`
		FT    string `json:"ft"`
		Code  string `json:"code"`
		Msg   []byte `json:"msg"`
		Out   []byte `json:"out"`
		Err   []byte `json:"err"`
		C     []byte `json:"c"`
		Lines []byte `json:"lines"`
		RC    int    `json:"rc"`
		N     int    `json:"n"`
		S     int    `json:"s"`
		T     int    `json:"t"`
		U     bool   `json:"u"`
		OS    int    `json:"os"`
		OL    int    `json:"ol"`
		NS    int    `json:"ns"`
		NL    int    `json:"nl"`
	}
	if err := json.Unmarshal([]byte(line), &p); err != nil {
		return Result{}, false
	}
	r := Result{Kind: k}
	switch {
	case p.K == "error":
		r.ErrorCode, r.ErrorMessage = p.Code, string(p.Msg)
	case p.K == "bash" && k == Bash:
		r.Stdout, r.Stderr, r.ReturnCode = string(p.Out), string(p.Err), p.RC
	case p.K == "view" && k == Editor:
		ft := p.FT
		if ft == "" {
			ft = "text"
		}
		r.View = &View{FileType: ft, Content: string(p.C), NumLines: p.N, StartLine: p.S, TotalLines: p.T}
	case p.K == "create" && k == Editor:
		r.Create = &Create{IsFileUpdate: p.U}
	case p.K == "replace" && k == Editor:
		r.Replace = &Replace{OldStart: p.OS, OldLines: p.OL, NewStart: p.NS, NewLines: p.NL, Lines: strings.Split(string(p.Lines), "\n")}
	default:
		return Result{}, false
	}
	return r, true
}
