package responses

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// keptExchange returns the exchange of a request body with the code tool.
func keptExchange(t *testing.T, body string) *exchange {
	t.Helper()
	x, err := Surface{}.NewExchange([]byte(body), schema.Options{FunctionName: "code_interpreter"})
	require.NoError(t, err, "new exchange of %s", body)
	return x.(*exchange)
}

const keptFinal = `{"id":"resp_1","object":"response","status":"completed","output":[{"type":"code_interpreter_call","id":"ci_1"}],"tools":[{"type":"code_interpreter"}]}`

func TestServeStored(t *testing.T) {
	p := memory.NewPending(nil)
	x := keptExchange(t, `{"model":"m","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":[`+
		`{"role":"user","content":"one"},{"type":"message","role":"user","content":"two","id":"msg_b"},{"role":"user","content":"three"}]}`)
	x.Keep(p, "id-a", []byte(keptFinal))
	serveBody := func(identity, method, rest, query, body string) (int, string, bool) {
		st, b, stream, live, ok := Surface{}.ServeStored(p, func() string { return identity }, method, rest, query, []byte(body))
		assert.False(t, live, "%s %s?%s: a kept answer's stream is over", method, rest, query)
		asked := strings.Contains(query, "stream=true") || strings.Contains(body, `"stream":true`)
		assert.Equal(t, st == http.StatusOK && asked, stream, "%s %s?%s: an event stream only for stream=true", method, rest, query)
		return st, string(b), ok
	}
	serve := func(identity, method, rest, query string) (int, string, bool) {
		return serveBody(identity, method, rest, query, "")
	}

	st, body, ok := serve("id-a", http.MethodGet, "/resp_1", "")
	require.True(t, ok, "GET of a kept answer is served")
	assert.Equal(t, http.StatusOK, st)
	assert.JSONEq(t, keptFinal, body, "GET returns the answer as the client got it")

	for _, tt := range []struct{ name, identity, method, rest string }{
		{"another identity", "id-b", http.MethodGet, "/resp_1"},
		{"the anonymous identity", "", http.MethodGet, "/resp_1"},
		{"an id never kept", "id-a", http.MethodGet, "/resp_2"},
		{"a POST", "id-a", http.MethodPost, "/resp_1"},
		{"cancel", "id-a", http.MethodPost, "/resp_1/cancel"},
		{"another sub-path", "id-a", http.MethodGet, "/resp_1/other"},
		{"DELETE of input_items", "id-a", http.MethodDelete, "/resp_1/input_items"},
		{"no id", "id-a", http.MethodGet, "/"},
	} {
		_, _, ok := serve(tt.identity, tt.method, tt.rest, "")
		assert.False(t, ok, "%s goes upstream", tt.name)
	}

	st, body, ok = serve("id-a", http.MethodGet, "/resp_1/input_items", "order=asc")
	require.True(t, ok, "input_items of a kept answer is served")
	assert.Equal(t, http.StatusOK, st, body)
	data := gjson.Get(body, "data").Array()
	require.Len(t, data, 3, body)
	assert.Equal(t, "one", data[0].Get("content").String(), body)
	assert.Equal(t, "msg_b", data[1].Get("id").String(), "a client's id is kept: %s", body)
	for _, d := range data {
		assert.NotEmpty(t, d.Get("id").String(), "every listed item has an id: %s", body)
	}
	assert.Equal(t, data[0].Get("id").String(), gjson.Get(body, "first_id").String(), body)
	assert.Equal(t, data[2].Get("id").String(), gjson.Get(body, "last_id").String(), body)
	assert.False(t, gjson.Get(body, "has_more").Bool(), body)
	assert.Equal(t, "list", gjson.Get(body, "object").String(), body)

	_, body, _ = serve("id-a", http.MethodGet, "/resp_1/input_items", "")
	assert.Equal(t, "three", gjson.Get(body, "data.0.content").String(), "desc is the default order: %s", body)
	_, body, _ = serve("id-a", http.MethodGet, "/resp_1/input_items", "order=asc&after=msg_b&limit=1")
	assert.Equal(t, "three", gjson.Get(body, "data.0.content").String(), "after msg_b: %s", body)
	_, body, _ = serve("id-a", http.MethodGet, "/resp_1/input_items", "order=asc&limit=2")
	assert.True(t, gjson.Get(body, "has_more").Bool(), "limit 2 of 3: %s", body)
	assert.Len(t, gjson.Get(body, "data").Array(), 2, body)
	for _, q := range []string{"limit=0", "limit=101", "order=up", "after=msg_zz"} {
		st, body, _ = serve("id-a", http.MethodGet, "/resp_1/input_items", q)
		assert.Equal(t, http.StatusBadRequest, st, "query %s: %s", q, body)
	}
	st, body, _ = serve("id-a", http.MethodGet, "/resp_1", "stream=true")
	require.Equal(t, http.StatusOK, st, body)
	whole, err := SSE([]byte(keptFinal))
	require.NoError(t, err)
	assert.Equal(t, string(whole), body, "stream=true replays the answer's events")
	st, body, _ = serveBody("id-a", http.MethodGet, "/resp_1", "", `{"stream":true}`)
	assert.Equal(t, string(whole), body, "stream true in a JSON body, as openai-go sends it")
	st, body, _ = serve("id-a", http.MethodGet, "/resp_1", "stream=true&starting_after=1")
	require.Equal(t, http.StatusOK, st, body)
	assert.True(t, strings.HasPrefix(body, "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":2,"), "starting_after=1 starts at event 2: %.120s", body)
	assert.True(t, strings.HasSuffix(string(whole), body), "starting_after: the tail of the stream")
	st, _, _ = serve("id-a", http.MethodGet, "/resp_1", "stream=true&starting_after=x")
	assert.Equal(t, http.StatusBadRequest, st, "starting_after not a number")

	st, body, ok = serve("id-a", http.MethodDelete, "/resp_1", "")
	require.True(t, ok, "DELETE of a kept answer is served")
	assert.Equal(t, http.StatusOK, st)
	assert.JSONEq(t, `{"id":"resp_1","object":"response.deleted","deleted":true}`, body)
	for _, tt := range []struct{ method, rest string }{
		{http.MethodGet, "/resp_1"}, {http.MethodGet, "/resp_1/input_items"}, {http.MethodDelete, "/resp_1"},
	} {
		st, body, ok = serve("id-a", tt.method, tt.rest, "")
		require.True(t, ok, "%s %s after DELETE is answered here", tt.method, tt.rest)
		assert.Equal(t, http.StatusNotFound, st, "%s %s after DELETE", tt.method, tt.rest)
		assert.Equal(t, "Response with id 'resp_1' not found.", gjson.Get(body, "error.message").String(), body)
	}
}

func TestKeepSkips(t *testing.T) {
	tests := []struct {
		name, identity, body, final string
	}{
		{"store false", "id-a", `{"store":false,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"hi"}`, keptFinal},
		{"anonymous", "", `{"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"hi"}`, keptFinal},
		{"no id", "id-a", `{"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"hi"}`, `{"object":"response"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := memory.NewPending(nil)
			keptExchange(t, tt.body).Keep(p, tt.identity, []byte(tt.final))
			assert.False(t, p.Holds(kindStored), "nothing kept for %s", tt.name)
		})
	}
}

func TestStoredInput(t *testing.T) {
	var items []map[string]any
	require.NoError(t, json.Unmarshal(storedInput([]byte(`{"input":"hello"}`)), &items))
	require.Len(t, items, 1)
	assert.Equal(t, "message", items[0]["type"])
	assert.Equal(t, "user", items[0]["role"])
	assert.Regexp(t, `^msg_`, items[0]["id"])
	assert.Equal(t, []any{map[string]any{"type": "input_text", "text": "hello"}}, items[0]["content"])
	assert.Equal(t, "[]", string(storedInput([]byte(`{}`))), "no input lists nothing")
	assert.Regexp(t, `^\[\{"call_id":"c","id":"item_`, string(storedInput([]byte(`{"input":[{"type":"function_call_output","call_id":"c"}]}`))))
}
