package schematest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FollowUpFunc is a surface's FollowUp.
type FollowUpFunc func(req, resp []byte, outputs []schema.CallOutput, o schema.FollowUpOptions) ([]byte, error)

// FollowUpCase is a subtest of RunFollowUpGolden: Name names the testdata/followup/<Name>.*.json
// files.
type FollowUpCase struct {
	Name    string
	Outputs []schema.CallOutput
	Opts    schema.FollowUpOptions
}

// RunFollowUpGolden runs followUp on each case's request and response and compares the result
// with its want.json (CheckTestdata, which writes it when update is set).
func RunFollowUpGolden(t *testing.T, followUp FollowUpFunc, tests []FollowUpCase, update bool) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.Name, func(t *testing.T) {
			req := ReadFile(t, "followup/"+tt.Name+".req.json")
			resp := ReadFile(t, "followup/"+tt.Name+".resp.json")
			got, err := followUp(req, resp, tt.Outputs, tt.Opts)
			require.NoError(t, err, "FollowUp(%s)", tt.Name)
			CheckTestdata(t, "followup/"+tt.Name+".want.json", got, update)
			assert.True(t, json.Valid(got), "FollowUp(%s) is not valid JSON: %s", tt.Name, got)
		})
	}
}

// FuzzFollowUp checks that parse and followUp never panic on arbitrary request and response
// bodies, and that a follow-up built without error is valid JSON that parse reads. The seeds
// are the named testdata/followup cases.
func FuzzFollowUp(f *testing.F, names []string, parse ParseTurnFunc, followUp FollowUpFunc) {
	for _, name := range names {
		req, err := os.ReadFile(filepath.Join("testdata", "followup", name+".req.json"))
		if err != nil {
			f.Fatalf("read %s: %v", name, err)
		}
		resp, err := os.ReadFile(filepath.Join("testdata", "followup", name+".resp.json"))
		if err != nil {
			f.Fatalf("read %s: %v", name, err)
		}
		f.Add(req, resp, byte(0))
	}
	f.Fuzz(func(t *testing.T, req, resp []byte, opts byte) {
		turn, err := parse(resp, "")
		if err != nil {
			return
		}
		var outs []schema.CallOutput
		for _, c := range turn.Calls {
			outs = append(outs, schema.CallOutput{CallID: c.CallID, Output: "out " + c.CallID})
		}
		o := schema.FollowUpOptions{DropToolChoice: opts&1 != 0, ToolChoiceNone: opts&2 != 0}
		next, err := followUp(req, resp, outs, o)
		if err != nil {
			return
		}
		if !json.Valid(req) {
			// The request is checked as RewriteRequest checks it: loose bytes inside strings it
			// does not read pass through (the upstream refuses them), so the output is only as
			// valid as the input.
			return
		}
		if !json.Valid(next) {
			t.Fatalf("FollowUp(%q, %q) = %q, not valid JSON", req, resp, next)
		}
		if _, err := parse(next, ""); err != nil {
			t.Fatalf("ParseTurn(FollowUp(%q, %q)) = %v", req, resp, err)
		}
	})
}
