package fakemodel

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/zap/zaptest"
)

// TestModels: GET /v1/models takes every key until keys are added, then only those; no key is
// a 401 either way.
func TestModels(t *testing.T) {
	s := New(t)
	code, body := get(t, s, "/v1/models", "Bearer sk-any")
	assert.Equal(t, http.StatusOK, code, "every key before keys are added: %s", body)
	assert.Equal(t, "list", gjson.Get(body, "object").String(), "a model list")
	code, _ = get(t, s, "/v1/models", "")
	assert.Equal(t, http.StatusUnauthorized, code, "no key")

	s.AddKey("sk-a")
	code, _ = get(t, s, "/v1/models", "Bearer sk-a")
	assert.Equal(t, http.StatusOK, code, "an added key")
	code, body = get(t, s, "/v1/models", "Bearer sk-any")
	assert.Equal(t, http.StatusUnauthorized, code, "a key not added")
	assert.Equal(t, "invalid_api_key", gjson.Get(body, "error.code").String(), "code: %s", body)
	assert.Len(t, s.RequestsTo("/v1/models"), 4, "every call is recorded")
}

func TestControlKeys(t *testing.T) {
	s, err := Start(zaptest.NewLogger(t))
	require.NoError(t, err, "Start")
	defer s.Close()
	ctl := httptest.NewServer(NewControl(s))
	defer ctl.Close()
	status, _ := controlCall(t, ctl, http.MethodPost, "/keys", `{"key":"sk-k"}`)
	require.Equal(t, http.StatusOK, status, "add a key")
	code, _ := get(t, s, "/v1/models", "Bearer sk-k")
	assert.Equal(t, http.StatusOK, code, "the added key")
	code, _ = get(t, s, "/v1/models", "Bearer sk-other")
	assert.Equal(t, http.StatusUnauthorized, code, "another")
	status, _ = controlCall(t, ctl, http.MethodPost, "/reset", `{}`)
	require.Equal(t, http.StatusOK, status, "reset")
	code, _ = get(t, s, "/v1/models", "Bearer sk-other")
	assert.Equal(t, http.StatusOK, code, "every key after a reset")
	status, _ = controlCall(t, ctl, http.MethodPost, "/keys", `{}`)
	assert.Equal(t, http.StatusBadRequest, status, "no key")
}
