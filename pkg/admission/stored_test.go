package admission_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema/chat"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// The answer of a request admission let through is kept on a 200, for its caller only, and
// served by the surface; nothing is kept without a Stored store, nor for another status.
func TestStoredAnswers(t *testing.T) {
	const (
		body  = `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`
		final = `{"id":"resp_9","object":"response","output":[]}`
	)
	stored := memory.NewPending(nil)
	a := admission.New(nil, memory.NewPending(nil), admission.Config{Stored: stored})
	answer := func(status int) {
		ad, r := a.Prepare(t.Context(), exchange(t, body), &caller{id: "id-a"}, admission.Request{Path: "/v1/responses"})
		require.Nil(t, r, "admitted")
		ad.Answered(loop.Response{Status: status, Body: []byte(final)})
	}
	answer(http.StatusBadGateway)
	assert.Nil(t, a.Stored(responses.Surface{}, http.MethodGet, "/resp_9", "", nil, &caller{id: "id-a"}), "a 502 is not kept")
	answer(http.StatusOK)

	got := a.Stored(responses.Surface{}, http.MethodGet, "/resp_9", "", nil, &caller{id: "id-a"})
	require.NotNil(t, got, "the caller's answer is served")
	assert.Equal(t, http.StatusOK, got.Status)
	assert.JSONEq(t, final, string(got.Body))
	assert.Nil(t, a.Stored(responses.Surface{}, http.MethodGet, "/resp_9", "", nil, &caller{id: "id-b"}), "another caller's request goes upstream")
	assert.Nil(t, a.Stored(chat.Surface{}, http.MethodGet, "/resp_9", "", nil, &caller{id: "id-a"}), "a surface that keeps nothing serves nothing")

	off := admission.New(nil, memory.NewPending(nil), admission.Config{})
	ad, r := off.Prepare(t.Context(), exchange(t, body), &caller{id: "id-a"}, admission.Request{Path: "/v1/responses"})
	require.Nil(t, r, "admitted")
	ad.Answered(loop.Response{Status: http.StatusOK, Body: []byte(final)})
	assert.Nil(t, off.Stored(responses.Surface{}, http.MethodGet, "/resp_9", "", nil, &caller{id: "id-a"}), "no Stored store, nothing served")
}
