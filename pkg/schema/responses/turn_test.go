package responses

import (
	"errors"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// turnWant is a Call with its error reduced to a kind: "", "args", "duplicate" or "missing".
type turnWant struct {
	ItemID, CallID, Arguments, Code, Err string
}

func turnErrKind(err error) string {
	var ae *schema.ArgumentsError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, schema.ErrDuplicateCallID):
		return "duplicate"
	case errors.Is(err, schema.ErrMissingCallID):
		return "missing"
	case errors.As(err, &ae):
		return "args"
	}
	return "other: " + err.Error()
}

func TestParseTurn(t *testing.T) {
	tests := []struct {
		name            string
		functionName    string
		wantCalls       []turnWant
		wantClientCalls int
		wantClientIDs   []string // Chat only
	}{
		{
			name:      "responses_one_call",
			wantCalls: []turnWant{{ItemID: "fc_1", CallID: "call_1", Arguments: `{"code": "import math\nprint(math.factorial(20))"}`, Code: "import math\nprint(math.factorial(20))"}},
		},
		{name: "responses_text"},
		{
			name: "responses_one_call", functionName: "python",
			wantClientCalls: 1, // under another name, our function is a client's
		},
		{
			name: "responses_mixed",
			wantCalls: []turnWant{
				{ItemID: "fc_1", CallID: "call_a", Arguments: `{"code":"1+1"}`, Code: "1+1"},
				{ItemID: "fc_3", CallID: "call_e", Arguments: `{"code":"2+2"}`, Code: "2+2"},
			},
			wantClientCalls: 3, // get_weather, the custom tool, the MCP approval; not the answered shell call
		},
		{
			name: "responses_bad_args",
			wantCalls: []turnWant{
				{ItemID: "fc_1", CallID: "c1", Arguments: `{"code":"print(1)"}}`, Err: "args"},
				{ItemID: "fc_2", CallID: "c2", Arguments: `"print(2)"`, Err: "args"},
				{ItemID: "fc_3", CallID: "c3", Arguments: `{"source":"print(3)"}`, Err: "args"},
				{ItemID: "fc_4", CallID: "c4", Arguments: `{"code":4}`, Err: "args"},
				{ItemID: "fc_5", CallID: "c5", Arguments: `not json`, Err: "args"},
				{ItemID: "fc_6", CallID: "c6", Arguments: `{"code":"a","code":"b"}`, Err: "args"},
				{ItemID: "fc_7", CallID: "c7", Err: "args"},
				{ItemID: "fc_8", CallID: "c8", Arguments: `{"code":"print(\"obj\")"}`, Code: `print("obj")`},
				{
					ItemID: "fc_9", CallID: "c9",
					Arguments: ` {"code": "s = '\u00e9\u2603 \ud83d\ude00'\nprint(s)", "language": "python"}` + "\n",
					Code:      "s = 'é☃ 😀'\nprint(s)",
				},
				{ItemID: "fc_10", CallID: "c9", Arguments: `{"code":"dup"}`, Code: "dup", Err: "duplicate"},
				{ItemID: "fc_11", Arguments: `{"code":"no id"}`, Code: "no id", Err: "missing"},
				{ItemID: "fc_12", CallID: "c12", Arguments: `{"code":""}`},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.functionName, func(t *testing.T) {
			body := reqReadFile(t, "turn/"+tt.name+".json")
			got, err := ParseTurn(body, tt.functionName)
			require.NoError(t, err, "ParseTurn(%s)", tt.name)
			var calls []turnWant
			for _, c := range got.Calls {
				w := turnWant{ItemID: c.ItemID, CallID: c.CallID, Arguments: c.Arguments, Err: turnErrKind(c.ArgsErr)}
				if c.ArgsErr == nil || w.Err != "args" {
					w.Code = c.Code
				}
				calls = append(calls, w)
			}
			assert.Equal(t, tt.wantCalls, calls, "ParseTurn(%s) calls", tt.name)
			assert.Equal(t, tt.wantClientCalls, got.ClientCalls, "ParseTurn(%s) client calls", tt.name)
			assert.Equal(t, tt.wantClientIDs, got.ClientCallIDs, "ParseTurn(%s) client call ids", tt.name)
		})
	}
}

func TestParseTurnShapes(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		wantErr bool
	}{
		{"malformed", `{"output":[`, true},
		{"array", `[{"output":[]}]`, true},
		{"no output", `{"id":"resp_1"}`, false},
		{"output not a list", `{"output":{"type":"function_call"}}`, false},
		{"output items not objects", `{"output":[1,"a",null,[]]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTurn([]byte(tt.give), "")
			if tt.wantErr {
				assert.Error(t, err, "ParseTurn(%s)", tt.give)
				return
			}
			require.NoError(t, err, "ParseTurn(%s)", tt.give)
			assert.Equal(t, schema.Turn{}, got, "ParseTurn(%s)", tt.give)
		})
	}
}

func TestParseTurnArgumentsErrorNamesTheProblem(t *testing.T) {
	body := []byte(`{"output":[{"type":"function_call","call_id":"c1","name":"code_interpreter","arguments":"{\"code\":1}"}]}`)
	got, err := ParseTurn(body, "")
	require.NoError(t, err, "ParseTurn(%s)", body)
	require.Len(t, got.Calls, 1, "ParseTurn(%s) calls", body)
	assert.ErrorContains(t, got.Calls[0].ArgsErr, `"code" is not a string`, "ParseTurn(%s) ArgsErr", body)
}
