package chat

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
			name:      "chat_one_call",
			wantCalls: []turnWant{{ItemID: "call_x", CallID: "call_x", Arguments: `{"code":"print(2**100)"}`, Code: "print(2**100)"}},
		},
		{name: "chat_text"},
		{name: "chat_legacy_function_call", wantClientCalls: 1},
		{
			name: "chat_mixed",
			wantCalls: []turnWant{
				{ItemID: "call_1", CallID: "call_1", Arguments: `{"code":"1"}`, Code: "1"},
				{ItemID: "call_4", CallID: "call_4", Arguments: `{"code":"2"}`, Code: "2"},
				{ItemID: "call_1", CallID: "call_1", Arguments: `{"code":"3"}`, Code: "3", Err: "duplicate"},
				{Arguments: `{"code":"4"}`, Code: "4", Err: "missing"},
				{ItemID: "call_5", CallID: "call_5", Arguments: `{"code":"5"}trailing`, Err: "args"},
			},
			wantClientCalls: 2, // lookup and the custom tool; choices[1] is not read
			wantClientIDs:   []string{"call_2", "call_3"},
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
		{"string", `"choices"`, true},
		{"empty", ``, true},
		{"no choices", `{"id":"x"}`, false},
		{"empty choices", `{"choices":[]}`, false},
		{"message null", `{"choices":[{"message":null}]}`, false},
		{"tool_calls null", `{"choices":[{"message":{"role":"assistant","tool_calls":null}}]}`, false},
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
