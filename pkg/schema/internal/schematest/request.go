package schematest

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RunRewriteGolden runs, in a subtest called name, rewrite on testdata/request/<name>.give.json
// with opts: its body must match <name>.want.json (CheckTestdata, which writes it when update
// is set) and be valid JSON, and the rest of its result must be want.
func RunRewriteGolden(t *testing.T, rewrite RewriteFunc, name string, opts schema.Options, want schema.Request, update bool) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		give := ReadFile(t, "request/"+name+".give.json")
		got, err := rewrite(give, opts)
		require.NoError(t, err, "RewriteRequest(%s)", name)
		CheckTestdata(t, "request/"+name+".want.json", got.Body, update)
		assert.True(t, json.Valid(got.Body), "RewriteRequest(%s) body is not valid JSON", name)
		got.Body = nil
		assert.Equal(t, want, got, "RewriteRequest(%s)", name)
	})
}

// RunRewriteUnchanged checks, in a subtest called name, that rewrite gives back give itself,
// not a copy, and finds nothing.
func RunRewriteUnchanged(t *testing.T, rewrite RewriteFunc, name string, give []byte) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		got, err := rewrite(give, schema.Options{})
		require.NoError(t, err, "RewriteRequest(%s)", give)
		assert.Equal(t, schema.Request{Body: give}, got, "RewriteRequest(%s)", give)
		assert.Same(t, &give[0], &got.Body[0], "RewriteRequest(%s) copied the body", give)
	})
}

// RunRewriteError checks, in a subtest called name, that rewrite refuses give with a 400
// *schema.RequestError with wantParam, wantCode and a message.
func RunRewriteError(t *testing.T, rewrite RewriteFunc, name, give, wantParam, wantCode string) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		_, err := rewrite([]byte(give), schema.Options{})
		var re *schema.RequestError
		require.True(t, errors.As(err, &re), "RewriteRequest(%q) error = %v, want a *RequestError", give, err)
		assert.Equal(t, 400, re.HTTPStatus(), "RewriteRequest(%q) status", give)
		assert.Equal(t, wantParam, re.Param, "RewriteRequest(%q) param", give)
		assert.Equal(t, wantCode, re.Code, "RewriteRequest(%q) code", give)
		assert.NotEmpty(t, re.Message, "RewriteRequest(%q) message", give)
	})
}

// RunRewriteLooseStrings checks, in a subtest called name, a body give that is malformed inside
// strings rewrite does not read, where TOOL stands for tool, the code_interpreter tool: rewrite
// puts fnTool in its place and leaves every other byte as it was, and without the tool gives
// the body back as it is.
func RunRewriteLooseStrings(t *testing.T, rewrite RewriteFunc, name, give, tool string, fnTool []byte) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		body := []byte(strings.Replace(give, "TOOL", tool, 1))
		require.False(t, json.Valid(body), "%s is valid JSON; the case needs a malformed string", body)
		want := strings.Replace(give, "TOOL", string(fnTool), 1)
		got, err := rewrite(body, schema.Options{})
		require.NoError(t, err, "RewriteRequest(%q)", body)
		assert.True(t, got.Found, "RewriteRequest(%q) found", body)
		assert.Equal(t, want, string(got.Body), "RewriteRequest(%q)", body)

		withoutTool := bytes.Replace(body, []byte(tool), nil, 1)
		got, err = rewrite(withoutTool, schema.Options{})
		require.NoError(t, err, "RewriteRequest(%q)", withoutTool)
		assert.Equal(t, schema.Request{Body: withoutTool}, got, "RewriteRequest(%q)", withoutTool)
	})
}
