package responses

import (
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/schematest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTurn(t *testing.T) {
	tests := []schematest.TurnCase{
		{
			Name:      "responses_one_call",
			WantCalls: []schematest.TurnCall{{ItemID: "fc_1", CallID: "call_1", Arguments: `{"code": "import math\nprint(math.factorial(20))"}`, Code: "import math\nprint(math.factorial(20))"}},
		},
		{Name: "responses_text"},
		{
			Name: "responses_one_call", FunctionName: "python",
			WantClientCalls: 1, // under another name, our function is a client's
		},
		{
			Name: "responses_mixed",
			WantCalls: []schematest.TurnCall{
				{ItemID: "fc_1", CallID: "call_a", Arguments: `{"code":"1+1"}`, Code: "1+1"},
				{ItemID: "fc_3", CallID: "call_e", Arguments: `{"code":"2+2"}`, Code: "2+2"},
			},
			WantClientCalls: 3, // get_weather, the custom tool, the MCP approval; not the answered shell call
		},
		{
			Name: "responses_bad_args",
			WantCalls: []schematest.TurnCall{
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
	schematest.RunParseTurn(t, ParseTurn, tests)
}

func TestParseTurnShapes(t *testing.T) {
	tests := []schematest.TurnShapeCase{
		{Name: "malformed", Give: `{"output":[`, WantErr: true},
		{Name: "array", Give: `[{"output":[]}]`, WantErr: true},
		{Name: "no output", Give: `{"id":"resp_1"}`, WantErr: false},
		{Name: "output not a list", Give: `{"output":{"type":"function_call"}}`, WantErr: false},
		{Name: "output items not objects", Give: `{"output":[1,"a",null,[]]}`, WantErr: false},
	}
	schematest.RunParseTurnShapes(t, ParseTurn, tests)
}

func TestParseTurnArgumentsErrorNamesTheProblem(t *testing.T) {
	body := []byte(`{"output":[{"type":"function_call","call_id":"c1","name":"code_interpreter","arguments":"{\"code\":1}"}]}`)
	got, err := ParseTurn(body, "")
	require.NoError(t, err, "ParseTurn(%s)", body)
	require.Len(t, got.Calls, 1, "ParseTurn(%s) calls", body)
	assert.ErrorContains(t, got.Calls[0].ArgsErr, `"code" is not a string`, "ParseTurn(%s) ArgsErr", body)
}
