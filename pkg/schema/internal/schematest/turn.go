package schematest

import (
	"errors"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ParseTurnFunc is a surface's ParseTurn.
type ParseTurnFunc func(body []byte, functionName string) (schema.Turn, error)

// TurnCall is a Call with its error reduced to a kind: "", "args", "duplicate" or "missing".
type TurnCall struct {
	ItemID, CallID, Arguments, Code, Err string
}

// turnErrKind is err's kind in a TurnCall.
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

// TurnCase is a subtest of RunParseTurn: Name names testdata/turn/<Name>.json.
type TurnCase struct {
	Name            string
	FunctionName    string
	WantCalls       []TurnCall
	WantClientCalls int
	WantClientIDs   []string // Chat only
}

// RunParseTurn runs parse on each case's body, in a subtest named Name/FunctionName, and
// compares its calls and client calls with the case's.
func RunParseTurn(t *testing.T, parse ParseTurnFunc, tests []TurnCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.Name+"/"+tt.FunctionName, func(t *testing.T) {
			body := ReadFile(t, "turn/"+tt.Name+".json")
			got, err := parse(body, tt.FunctionName)
			require.NoError(t, err, "ParseTurn(%s)", tt.Name)
			var calls []TurnCall
			for _, c := range got.Calls {
				w := TurnCall{ItemID: c.ItemID, CallID: c.CallID, Arguments: c.Arguments, Err: turnErrKind(c.ArgsErr)}
				if c.ArgsErr == nil || w.Err != "args" {
					w.Code = c.Code
				}
				calls = append(calls, w)
			}
			assert.Equal(t, tt.WantCalls, calls, "ParseTurn(%s) calls", tt.Name)
			assert.Equal(t, tt.WantClientCalls, got.ClientCalls, "ParseTurn(%s) client calls", tt.Name)
			assert.Equal(t, tt.WantClientIDs, got.ClientCallIDs, "ParseTurn(%s) client call ids", tt.Name)
		})
	}
}

// TurnShapeCase is a subtest of RunParseTurnShapes: a body Give that parse refuses (WantErr)
// or reads as an empty turn.
type TurnShapeCase struct {
	Name    string
	Give    string
	WantErr bool
}

// RunParseTurnShapes checks that parse refuses each WantErr body and reads every other as an
// empty schema.Turn.
func RunParseTurnShapes(t *testing.T, parse ParseTurnFunc, tests []TurnShapeCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.Name, func(t *testing.T) {
			got, err := parse([]byte(tt.Give), "")
			if tt.WantErr {
				assert.Error(t, err, "ParseTurn(%s)", tt.Give)
				return
			}
			require.NoError(t, err, "ParseTurn(%s)", tt.Give)
			assert.Equal(t, schema.Turn{}, got, "ParseTurn(%s)", tt.Give)
		})
	}
}
