package messages

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Call is one call of the code tools in a model's answer.
type Call struct {
	// ID is the tool_use block's id.
	ID string
	// Kind is what the call asks for.
	Kind Kind
	// Input is the call's input object as the model wrote it.
	Input []byte
	// Code is the Python code (Python) or the command (Bash).
	Code string
	// Command, Path, FileText, OldStr and NewStr are a text editor call's fields.
	Command, Path, FileText, OldStr, NewStr string
	// ViewRange is a view's [start_line, end_line] (1-based, end_line -1 for the end of the
	// file), nil for the whole file.
	ViewRange *[2]int
	// InputErr, when set, says why the input cannot be run (the result is then an
	// invalid_tool_input error).
	InputErr error
}

// Turn is what a model's answer asks for.
type Turn struct {
	// Calls are the calls of the code tools, in order.
	Calls []Call
	// ClientCallIDs are the ids of the calls of the client's own tools.
	ClientCallIDs []string
	// StopReason is the answer's stop_reason.
	StopReason string
}

// ParseTurn reads the model's answer (a Messages API message) for calls of rq's tools.
func ParseTurn(answer []byte, rq Request) (Turn, error) {
	if !gjson.ValidBytes(answer) {
		return Turn{}, errors.New("the model's answer is not valid JSON")
	}
	msg := gjson.ParseBytes(answer)
	if !msg.IsObject() {
		return Turn{}, errors.New("the model's answer is not a JSON object")
	}
	t := Turn{StopReason: msg.Get("stop_reason").String()}
	for _, b := range msg.Get("content").Array() {
		if b.Get("type").String() != "tool_use" {
			continue
		}
		id, name := b.Get("id").String(), b.Get("name").String()
		k := rq.Names.kindOf(name, rq.Version)
		if k == 0 {
			t.ClientCallIDs = append(t.ClientCallIDs, id)
			continue
		}
		t.Calls = append(t.Calls, parseCall(id, k, b.Get("input")))
	}
	return t, nil
}

func parseCall(id string, k Kind, in gjson.Result) Call {
	c := Call{ID: id, Kind: k, Input: []byte(in.Raw)}
	if !in.IsObject() {
		c.Input = []byte("{}")
		c.InputErr = errors.New("the input must be an object")
		return c
	}
	str := func(field string, required bool) string {
		v := in.Get(field)
		switch {
		case v.Type == gjson.String:
			return v.String()
		case v.Exists() || required:
			if c.InputErr == nil {
				c.InputErr = fmt.Errorf("%s must be a string", field)
			}
		}
		return ""
	}
	switch k {
	case Python:
		c.Code = str("code", true)
	case Bash:
		c.Code = str("command", true)
	case Editor:
		c.Command, c.Path = str("command", true), str("path", true)
		c.FileText, c.OldStr, c.NewStr = str("file_text", false), str("old_str", false), str("new_str", false)
		switch c.Command {
		case "view":
			if vr := in.Get("view_range"); vr.Exists() && vr.Type != gjson.Null && c.InputErr == nil {
				c.ViewRange, c.InputErr = viewRange(vr)
			}
		case "create":
			if !in.Get("file_text").Exists() && c.InputErr == nil {
				c.InputErr = errors.New("create needs file_text")
			}
		case "str_replace":
			if !in.Get("old_str").Exists() && c.InputErr == nil {
				c.InputErr = errors.New("str_replace needs old_str")
			}
		default:
			if c.InputErr == nil {
				c.InputErr = fmt.Errorf("unknown command %q: expected view, create or str_replace", c.Command)
			}
		}
	}
	return c
}

// viewRange reads a view's view_range: two integers, a start line from 1 and an end line not
// before it, or -1.
func viewRange(vr gjson.Result) (*[2]int, error) {
	a := vr.Array()
	bad := errors.New("view_range must be [start_line, end_line]: lines from 1, end_line -1 for the end of the file")
	if !vr.IsArray() || len(a) != 2 || a[0].Type != gjson.Number || a[1].Type != gjson.Number {
		return nil, bad
	}
	start, end := a[0].Int(), a[1].Int()
	if float64(start) != a[0].Num || float64(end) != a[1].Num || start < 1 || start > 1<<30 || end > 1<<30 || end != -1 && end < start {
		return nil, bad
	}
	return &[2]int{int(start), int(end)}, nil
}

// CallResult is the result of one call, for the follow-up.
type CallResult struct {
	// ID is the call's tool_use id.
	ID string
	// Result is what it gave.
	Result Result
	// Text, when set, is the tool_result text the model gets instead of Result's (see
	// [Result.ForModel]): the loop's own text for the run, with its notes.
	Text string
}

// FollowUpOptions tune [FollowUp].
type FollowUpOptions struct {
	// ToolChoice, when set, replaces the request's tool_choice (a forced choice's later rounds).
	ToolChoice []byte
	// ToolChoiceNone makes the model answer in text: tool_choice {"type":"none"}.
	ToolChoiceNone bool
	// ResultsOnly appends only the user turn of results: the answer's turn is already the
	// request's last (a resumed cell's call, see schema.Resume.Turn).
	ResultsOnly bool
}

// FollowUp is the next request of the loop: req (the request of the round) with the model's
// answer appended as an assistant turn and the results as a user turn of tool_result blocks.
func FollowUp(req, answer []byte, results []CallResult, o FollowUpOptions) ([]byte, error) {
	content := gjson.GetBytes(answer, "content")
	if !content.IsArray() {
		return nil, errors.New("follow-up: the model's answer has no content array")
	}
	blocks := make([]string, len(results))
	for i, r := range results {
		text, isErr := r.Result.ForModel()
		if r.Text != "" {
			text = r.Text
		}
		b := `{"type":"tool_result","tool_use_id":` + quote(r.ID) + `,"content":` + quote(text)
		if isErr {
			b += `,"is_error":true`
		}
		blocks[i] = b + "}"
	}
	turns := `{"role":"assistant","content":` + content.Raw + `},` + userTurn(blocks)
	if o.ResultsOnly {
		turns = userTurn(blocks)
	}
	out, err := appendMessages(req, turns)
	if err != nil {
		return nil, err
	}
	switch {
	case o.ToolChoiceNone:
		out, err = sjson.SetRawBytes(out, "tool_choice", []byte(`{"type":"none"}`))
	case o.ToolChoice != nil:
		out, err = sjson.SetRawBytes(out, "tool_choice", o.ToolChoice)
	}
	if err != nil {
		return nil, fmt.Errorf("follow-up: set tool_choice: %w", err)
	}
	return out, nil
}

// appendMessages splices turns (comma-separated messages) at the end of req's messages array,
// leaving every other byte as it was.
func appendMessages(req []byte, turns string) ([]byte, error) {
	msgs := gjson.GetBytes(req, "messages")
	if !msgs.IsArray() || msgs.Index <= 0 {
		return nil, errors.New("follow-up: the request has no messages array")
	}
	end := msgs.Index + len(msgs.Raw) - 1 // the closing bracket
	sep := ","
	if strings.TrimSpace(msgs.Raw[1:len(msgs.Raw)-1]) == "" {
		sep = ""
	}
	out := make([]byte, 0, len(req)+len(turns)+1)
	out = append(out, req[:end]...)
	out = append(out, sep...)
	out = append(out, turns...)
	out = append(out, req[end:]...)
	return out, nil
}
