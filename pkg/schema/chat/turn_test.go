package chat

import (
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
)

func TestParseTurn(t *testing.T) {
	tests := []schematest.TurnCase{
		{
			Name:      "chat_one_call",
			WantCalls: []schematest.TurnCall{{ItemID: "call_x", CallID: "call_x", Arguments: `{"code":"print(2**100)"}`, Code: "print(2**100)"}},
		},
		{Name: "chat_text"},
		{Name: "chat_legacy_function_call", WantClientCalls: 1},
		{
			Name: "chat_mixed",
			WantCalls: []schematest.TurnCall{
				{ItemID: "call_1", CallID: "call_1", Arguments: `{"code":"1"}`, Code: "1"},
				{ItemID: "call_4", CallID: "call_4", Arguments: `{"code":"2"}`, Code: "2"},
				{ItemID: "call_1", CallID: "call_1", Arguments: `{"code":"3"}`, Code: "3", Err: "duplicate"},
				{Arguments: `{"code":"4"}`, Code: "4", Err: "missing"},
				{ItemID: "call_5", CallID: "call_5", Arguments: `{"code":"5"}trailing`, Err: "args"},
			},
			WantClientCalls: 2, // lookup and the custom tool; choices[1] is not read
			WantClientIDs:   []string{"call_2", "call_3"},
		},
	}
	schematest.RunParseTurn(t, ParseTurn, tests)
}

func TestParseTurnShapes(t *testing.T) {
	tests := []schematest.TurnShapeCase{
		{Name: "string", Give: `"choices"`, WantErr: true},
		{Name: "empty", Give: ``, WantErr: true},
		{Name: "no choices", Give: `{"id":"x"}`, WantErr: false},
		{Name: "empty choices", Give: `{"choices":[]}`, WantErr: false},
		{Name: "message null", Give: `{"choices":[{"message":null}]}`, WantErr: false},
		{Name: "tool_calls null", Give: `{"choices":[{"message":{"role":"assistant","tool_calls":null}}]}`, WantErr: false},
	}
	schematest.RunParseTurnShapes(t, ParseTurn, tests)
}
