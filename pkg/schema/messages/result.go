package messages

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// The error codes of the native result blocks.
const (
	ErrInvalidInput    = "invalid_tool_input"
	ErrUnavailable     = "unavailable"
	ErrTooManyRequests = "too_many_requests"
	ErrTimeExceeded    = "execution_time_exceeded"
	ErrOutputTooLarge  = "output_file_too_large" // bash only
	ErrFileNotFound    = "file_not_found"        // text editor only
)

// Result is what one call gave, as its native result block shows it.
type Result struct {
	// Kind is the call's kind.
	Kind Kind
	// Stdout, Stderr and ReturnCode are a Python or bash run's.
	Stdout, Stderr string
	ReturnCode     int
	// FileIDs are the ids of the files the run wrote ("code_execution_output" /
	// "bash_code_execution_output" entries).
	FileIDs []string
	// View, Create and Replace are a text editor call's result, one of them.
	View    *View
	Create  *Create
	Replace *Replace
	// ErrorCode, when set, makes the result an error block (ErrInvalidInput, ...), with
	// ErrorMessage for the text editor.
	ErrorCode, ErrorMessage string
	// NotRun reports that the call did not run (its error says why): it is not counted in
	// usage.server_tool_use.code_execution_requests.
	NotRun bool
	// ToolCalls, when set, are the calls of the client's tools a Python run is paused on: the
	// answer shows them as tool_use blocks called from the code, instead of a result block.
	ToolCalls []schema.ToolCall
}

// View is a text editor view: the file's lines, and where they are. The model reads them
// numbered.
type View struct {
	FileType                        string // "text", "image" or "pdf"
	Content                         string
	NumLines, StartLine, TotalLines int
}

// numbered is the view's content as the model reads it: each line after its number, as
// `cat -n` shows it.
func (v *View) numbered() string {
	if v.FileType == "image" || v.FileType == "pdf" {
		// The content is the file's bytes as base64, which the user sees; a model reads text.
		n := len(v.Content) / 4 * 3
		if len(v.Content) >= 2 {
			n -= strings.Count(v.Content[len(v.Content)-2:], "=")
		}
		return fmt.Sprintf("[%s file, %d bytes: shown to the user; its content is not text]", v.FileType, n)
	}
	if v.Content == "" {
		return "[the file is empty]"
	}
	start := v.StartLine
	if start < 1 {
		start = 1
	}
	lines := strings.Split(strings.TrimSuffix(v.Content, "\n"), "\n")
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%6d\t%s", start+i, l)
	}
	if v.TotalLines > start-1+len(lines) {
		fmt.Fprintf(&b, "\n[%d more lines not shown]", v.TotalLines-(start-1+len(lines)))
	}
	return b.String()
}

// Create is a text editor create.
type Create struct {
	IsFileUpdate bool
}

// Replace is a text editor str_replace: the changed lines.
type Replace struct {
	OldStart, OldLines, NewStart, NewLines int
	Lines                                  []string
}

// Block returns the result block the client sees after the call's server_tool_use.
func (r Result) Block(toolUseID string) string {
	return `{"type":"` + r.Kind.resultType() + `","tool_use_id":` + quote(toolUseID) + `,"content":` + r.content() + `}`
}

// content is the block's content object.
func (r Result) content() string {
	prefix := r.Kind.nativeName()
	if r.ErrorCode != "" {
		out := `{"type":"` + prefix + `_tool_result_error","error_code":` + quote(r.ErrorCode)
		if r.Kind == Editor {
			out += `,"error_message":` + quote(r.ErrorMessage)
		}
		return out + "}"
	}
	switch r.Kind {
	case Editor:
		switch {
		case r.View != nil:
			v := r.View
			ft := v.FileType
			if ft == "" {
				ft = "text"
			}
			return `{"type":"text_editor_code_execution_view_result","file_type":` + quote(ft) + `,"content":` + quote(v.Content) +
				`,"num_lines":` + itoa(v.NumLines) + `,"start_line":` + itoa(v.StartLine) + `,"total_lines":` + itoa(v.TotalLines) + `}`
		case r.Create != nil:
			return `{"type":"text_editor_code_execution_create_result","is_file_update":` + strconv.FormatBool(r.Create.IsFileUpdate) + `}`
		case r.Replace != nil:
			p := r.Replace
			lines := make([]string, len(p.Lines))
			for i, l := range p.Lines {
				lines[i] = quote(l)
			}
			return `{"type":"text_editor_code_execution_str_replace_result","old_start":` + itoa(p.OldStart) + `,"old_lines":` + itoa(p.OldLines) +
				`,"new_start":` + itoa(p.NewStart) + `,"new_lines":` + itoa(p.NewLines) + `,"lines":[` + strings.Join(lines, ",") + `]}`
		default:
			return `{"type":"text_editor_code_execution_tool_result_error","error_code":"unavailable","error_message":""}`
		}
	default:
		files := make([]string, len(r.FileIDs))
		for i, id := range r.FileIDs {
			files[i] = `{"type":"` + prefix + `_output","file_id":` + quote(id) + `}`
		}
		return `{"type":"` + prefix + `_result","stdout":` + quote(r.Stdout) + `,"stderr":` + quote(r.Stderr) +
			`,"return_code":` + itoa(r.ReturnCode) + `,"content":[` + strings.Join(files, ",") + `]}`
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// ForModel is the tool_result text the model gets for the result, and whether it is an error.
func (r Result) ForModel() (string, bool) {
	if r.ErrorCode != "" {
		text := "[error: " + r.ErrorCode
		if r.ErrorMessage != "" {
			text += ": " + r.ErrorMessage
		}
		return text + "]", true
	}
	switch {
	case r.Kind != Editor:
		var b strings.Builder
		b.WriteString(r.Stdout)
		if r.Stderr != "" {
			if b.Len() > 0 && !strings.HasSuffix(r.Stdout, "\n") {
				b.WriteByte('\n')
			}
			b.WriteString("[stderr]\n")
			b.WriteString(r.Stderr)
		}
		if r.ReturnCode != 0 {
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
				b.WriteByte('\n')
			}
			b.WriteString("[return code " + itoa(r.ReturnCode) + "]")
		}
		if len(r.FileIDs) > 0 {
			b.WriteString("\n[files written: " + itoa(len(r.FileIDs)) + "]")
		}
		if b.Len() == 0 {
			return "[no output]", false
		}
		return b.String(), r.ReturnCode != 0
	case r.View != nil:
		return r.View.numbered(), false
	case r.Create != nil:
		if r.Create.IsFileUpdate {
			return "[file updated]", false
		}
		return "[file created]", false
	case r.Replace != nil:
		return "[replaced; the changed lines now read:]\n" + strings.Join(r.Replace.Lines, "\n"), false
	}
	return "[no result]", true
}

// resultFromBlock reads a replayed result block's content back into a Result.
func resultFromBlock(k Kind, c gjson.Result) Result {
	r := Result{Kind: k}
	typ := c.Get("type").String()
	switch {
	case strings.HasSuffix(typ, "_tool_result_error"):
		r.ErrorCode, r.ErrorMessage = c.Get("error_code").String(), c.Get("error_message").String()
		if r.ErrorCode == "" {
			r.ErrorCode = ErrUnavailable
		}
	case typ == "text_editor_code_execution_view_result":
		r.View = &View{FileType: c.Get("file_type").String(), Content: c.Get("content").String(),
			NumLines: int(c.Get("num_lines").Int()), StartLine: int(c.Get("start_line").Int()), TotalLines: int(c.Get("total_lines").Int())}
	case typ == "text_editor_code_execution_create_result":
		r.Create = &Create{IsFileUpdate: c.Get("is_file_update").Bool()}
	case typ == "text_editor_code_execution_str_replace_result":
		p := &Replace{OldStart: int(c.Get("old_start").Int()), OldLines: int(c.Get("old_lines").Int()),
			NewStart: int(c.Get("new_start").Int()), NewLines: int(c.Get("new_lines").Int())}
		for _, l := range c.Get("lines").Array() {
			p.Lines = append(p.Lines, l.String())
		}
		r.Replace = p
	default:
		r.Stdout, r.Stderr = c.Get("stdout").String(), c.Get("stderr").String()
		if typ == "encrypted_code_execution_result" {
			r.Stdout = "[the output of this run is encrypted and not available]"
		}
		r.ReturnCode = int(c.Get("return_code").Int())
		for _, f := range c.Get("content").Array() {
			if id := f.Get("file_id").String(); id != "" {
				r.FileIDs = append(r.FileIDs, id)
			}
		}
	}
	return r
}

// renderResultBlock is the model's text for a replayed result block's content.
func renderResultBlock(k Kind, c gjson.Result) (string, bool) {
	return resultFromBlock(k, c).ForModel()
}
