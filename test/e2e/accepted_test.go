package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/internal/demo"
)

// keyedModel is an upstream like llama.cpp's llama-server started with --api-key: its model
// calls take only the keys given (a 401 otherwise), while GET /v1/models (the fake model's,
// with no key added) takes any.
func keyedModel(next http.HandlerFunc, keys ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if key == "" {
			key = r.Header.Get("X-Api-Key")
		}
		for _, k := range keys {
			if key == k {
				next(w, r)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}`))
	}
}

// TestModelCallAcceptsIdentity (issue 23, item 3): where GET /v1/models is public, every
// made-up key passed the key check and got containers. With api_key_check.mode "model_call"
// the Containers API and the Files routes take an identity only once a model call of it (plain
// or streamed) got a 2xx from the upstream.
func TestModelCallAcceptsIdentity(t *testing.T) {
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.ApiKeyCheck = &configv1.ApiKeyCheck{Mode: "model_call"}
		c.Sandbox.WarmPoolSize = proto.Uint32(0) // no code runs
	}})
	model := &demo.Model{}
	for _, p := range []string{responsesPath, chatPath} {
		env.Model.Handle(p, keyedModel(model.ServeHTTP, "sk-plain", "sk-streamed"))
	}
	env.Fronts(t, func(t *testing.T, s *Stack) {
		create := func(key string) (int, string) {
			return send(t, s, http.MethodPost, "/v1/containers", `{"name":"x"}`, "Authorization", "Bearer "+key)
		}
		for _, key := range []string{"sk-made-up", "sk-plain", "sk-streamed"} {
			status, body := create(key)
			assert.Equal(t, http.StatusUnauthorized, status, "%s before any model call: %s", key, body)
			assert.Equal(t, "invalid_api_key", gjson.Get(body, "error.code").String(), "the Containers API's 401: %s", body)
			status, body = send(t, s, http.MethodGet, "/v1/files/cfile_none", "", "X-Api-Key", key)
			assert.Equal(t, http.StatusUnauthorized, status, "%s on the Files route before any model call: %s", key, body)
		}

		chat := `{"model":"gpt-e2e","messages":[{"role":"user","content":"hi"}]}`
		status, body := send(t, s, http.MethodPost, chatPath, chat, "Authorization", "Bearer sk-made-up")
		assert.Equal(t, http.StatusUnauthorized, status, "the upstream refuses the made-up key: %s", body)
		status, body = send(t, s, http.MethodPost, chatPath, chat, "Authorization", "Bearer sk-plain")
		require.Equal(t, http.StatusOK, status, "a plain model call: %s", body)
		status, body = send(t, s, http.MethodPost, responsesPath,
			`{"model":"gpt-e2e","stream":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"hi"}`,
			"Authorization", "Bearer sk-streamed")
		require.Equal(t, http.StatusOK, status, "a streamed model call with the code tool: %s", body)
		assert.Contains(t, body, "response.completed", "the stream completed: %s", body)

		status, body = create("sk-made-up")
		assert.Equal(t, http.StatusUnauthorized, status, "a key the upstream refused on a model call: %s", body)
		for _, key := range []string{"sk-plain", "sk-streamed"} {
			status, body = create(key)
			require.Equal(t, http.StatusOK, status, "%s after its model call: %s", key, body)
			id := gjson.Get(body, "id").String()
			status, body = send(t, s, http.MethodGet, "/v1/files/cfile_none", "", "X-Api-Key", key)
			assert.Equal(t, http.StatusNotFound, status, "%s on the Files route after its model call: %s", key, body)
			status, body = send(t, s, http.MethodDelete, "/v1/containers/"+id, "", "Authorization", "Bearer "+key)
			assert.Equal(t, http.StatusOK, status, "delete %s's container: %s", key, body)
		}
	})
}
