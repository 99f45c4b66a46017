package schematest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// FinalFunc is a surface's Final.
type FinalFunc func(in schema.FinalInput) ([]byte, error)

// finalCase is the input.json of a testdata/final case.
type finalCase struct {
	Surface      string          `json:"surface"`
	FunctionName string          `json:"function_name"`
	Tool         json.RawMessage `json:"tool"`
	ToolChoice   json.RawMessage `json:"tool_choice"`
	Rounds       []struct {
		Body  json.RawMessage `json:"body"`
		Calls []struct {
			ID          string `json:"id"`
			Status      string `json:"status"`
			Code        string `json:"code"`
			ContainerID string `json:"container_id"`
			Outputs     []struct {
				Type string `json:"type"`
				Logs string `json:"logs"`
				URL  string `json:"url"`
			} `json:"outputs"`
		} `json:"calls"`
	} `json:"rounds"`
}

// LoadFinalCase reads testdata/final/<name>/input.json, a case of surface, as a
// schema.FinalInput.
func LoadFinalCase(t testing.TB, surface, name string) schema.FinalInput {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "final", name, "input.json"))
	require.NoError(t, err, "read case %s", name)
	var c finalCase
	require.NoError(t, json.Unmarshal(b, &c), "decode case %s", name)
	in := schema.FinalInput{FunctionName: c.FunctionName, Tool: c.Tool, ToolChoice: c.ToolChoice}
	require.Equal(t, surface, c.Surface, "surface of case %s", name)
	for _, r := range c.Rounds {
		round := schema.Round{Body: r.Body}
		for _, cc := range r.Calls {
			call := schema.CodeCall{ID: cc.ID, Status: cc.Status, Code: cc.Code, ContainerID: cc.ContainerID}
			for _, o := range cc.Outputs {
				call.Outputs = append(call.Outputs, schema.CodeOutput{Type: o.Type, Logs: o.Logs, URL: o.URL})
			}
			round.Calls = append(round.Calls, call)
		}
		in.Rounds = append(in.Rounds, round)
	}
	return in
}

// FinalKeepsCase is a subtest of RunFinalKeepsUntouchedBytes: Give names the case.
type FinalKeepsCase struct {
	Name, Give string
}

// RunFinalKeepsUntouchedBytes checks, for each case of surface, that every top-level member of
// final's answer but tools is byte-identical to the first round's upstream body.
func RunFinalKeepsUntouchedBytes(t *testing.T, final FinalFunc, surface string, tests []FinalKeepsCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.Name, func(t *testing.T) {
			in := LoadFinalCase(t, surface, tt.Give)
			got, err := final(in)
			require.NoError(t, err, "Final(%s)", tt.Give)
			body := in.Rounds[0].Body
			// Every top-level member but tools is byte-identical to the upstream body.
			gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
				if k.String() == "tools" {
					return true
				}
				assert.Equal(t, v.Raw, gjson.GetBytes(got, k.String()).Raw, "member %s of Final(%s)", k.String(), tt.Give)
				return true
			})
		})
	}
}

// CheckFinalDoesNotModifyInput checks that final leaves the round bodies of each named case of
// surface as they were.
func CheckFinalDoesNotModifyInput(t *testing.T, final FinalFunc, surface string, names []string) {
	t.Helper()
	for _, name := range names {
		in := LoadFinalCase(t, surface, name)
		var before [][]byte
		for _, r := range in.Rounds {
			before = append(before, bytes.Clone(r.Body))
		}
		_, err := final(in)
		require.NoError(t, err, "Final(%s)", name)
		for i, r := range in.Rounds {
			assert.Equal(t, string(before[i]), string(r.Body), "round %d body of %s changed by Final", i+1, name)
		}
	}
}

// FinalErrorCase is a subtest of RunFinalErrors: WantErr is part of the error Final returns.
type FinalErrorCase struct {
	Name    string
	Give    schema.FinalInput
	WantErr string
}

// RunFinalErrors checks that final refuses each case with an error that contains WantErr and
// starts "build final answer: ".
func RunFinalErrors(t *testing.T, final FinalFunc, tests []FinalErrorCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.Name, func(t *testing.T) {
			_, err := final(tt.Give)
			require.Error(t, err, "Final(%s)", tt.Name)
			assert.Contains(t, err.Error(), tt.WantErr, "error of Final(%s)", tt.Name)
			assert.True(t, strings.HasPrefix(err.Error(), "build final answer: "), "error prefix of Final(%s): %v", tt.Name, err)
		})
	}
}
