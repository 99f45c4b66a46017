package responses

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

func TestBackgroundRequest(t *testing.T) {
	tests := []struct {
		name           string
		give           string
		wantBackground bool
		wantUntouched  bool
	}{
		{"with the tool", `{"model":"m","background":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"}`, true, false},
		{"without the tool", `{"model":"m","background":true,"input":"x"}`, false, true},
		{"background false", `{"model":"m","background":false,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"}`, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := Surface{}.NewExchange([]byte(tt.give), schema.Options{})
			require.NoError(t, err)
			ex := x.(*exchange)
			assert.Equal(t, tt.wantBackground, ex.Background(), "%s: Background", tt.name)
			if tt.wantBackground {
				assert.False(t, gjson.GetBytes(x.Request().Body, "background").Exists(), "%s: the upstream gets no background", tt.name)
			}
			if tt.wantUntouched {
				assert.Equal(t, tt.give, string(x.Request().Body), "%s: the body passes untouched", tt.name)
			}
		})
	}
}

// The record of a background response goes queued → in_progress → completed through the
// store, with its events numbered in order, and cancel answers natively.
func TestBackgroundRecord(t *testing.T) {
	p := memory.NewPending(nil)
	give := `{"model":"m","background":true,"stream":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"}`
	x, err := Surface{}.NewExchange([]byte(give), schema.Options{})
	require.NoError(t, err)
	ex := x.(*exchange)
	id, answer, stream := ex.BeginBackground(p, "id-a", time.Unix(1700000000, 0))
	require.True(t, stream)
	assert.Equal(t, 2, strings.Count(string(answer), "\n\n"), "created and queued: %s", answer)
	serve := func(method, rest, query string) (int, string, bool) {
		st, b, _, live, ok := Surface{}.ServeStored(p, func() string { return "id-a" }, method, rest, query, nil)
		require.True(t, ok, "%s %s", method, rest)
		return st, string(b), live
	}
	st, body, _ := serve(http.MethodGet, "/"+id, "")
	assert.Equal(t, http.StatusOK, st)
	assert.Equal(t, "queued", gjson.Get(body, "status").String())
	assert.Equal(t, int64(1700000000), gjson.Get(body, "created_at").Int())

	ex.BackgroundRunning()
	_, _, live := serve(http.MethodGet, "/"+id, "stream=true")
	assert.True(t, live, "the stream of a response in progress is live")
	upstream := `{"id":"resp_up","object":"response","status":"completed","output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"42","annotations":[]}]}]}`
	rounds := []schema.Round{{Body: []byte(upstream)}}
	_, err = ex.ParseTurn(rounds[0].Body)
	require.NoError(t, err)
	final, err := ex.Final(rounds, "")
	require.NoError(t, err)
	assert.Equal(t, id, gjson.GetBytes(final, "id").String(), "the answer is named after the response")
	sink := ex.BackgroundSink()
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Body: rounds[0].Body}))
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDone, Body: final}))
	ex.EndBackground(http.StatusOK, final, false)

	_, events, live := serve(http.MethodGet, "/"+id, "stream=true")
	assert.False(t, live, "the stream of a completed response is over")
	n := 0
	for ev := range strings.SplitSeq(strings.TrimSuffix(events, "\n\n"), "\n\n") {
		data := ev[strings.Index(ev, "data: ")+6:]
		assert.Equal(t, int64(n), gjson.Get(data, "sequence_number").Int(), "event %d is numbered in order: %s", n, ev)
		if r := gjson.Get(data, "response"); r.Exists() {
			assert.Equal(t, id, r.Get("id").String(), "event %d names the response", n)
		}
		n++
	}
	assert.True(t, strings.HasSuffix(events, "\n\n") && strings.Contains(events, "event: response.completed\n"), events)
	assert.Equal(t, 1, strings.Count(events, "event: response.in_progress\n"), "in_progress once")
	st, body, _ = serve(http.MethodPost, "/"+id+"/cancel", "")
	assert.Equal(t, http.StatusBadRequest, st, "a completed response cannot be cancelled")
	assert.Contains(t, body, "Cannot cancel a completed response.")
}

// A background response deleted while it runs is asked to stop, and stays deleted: the run's
// later writes do not bring it back.
func TestBackgroundDeletedWhileRunning(t *testing.T) {
	p := memory.NewPending(nil)
	give := `{"model":"m","background":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"}`
	x, err := Surface{}.NewExchange([]byte(give), schema.Options{})
	require.NoError(t, err)
	ex := x.(*exchange)
	id, _, _ := ex.BeginBackground(p, "id-a", time.Unix(1700000000, 0))
	ex.BackgroundRunning()
	serve := func(method string) (int, string) {
		st, b, _, _, ok := Surface{}.ServeStored(p, func() string { return "id-a" }, method, "/"+id, "", nil)
		require.True(t, ok, "%s is answered here", method)
		return st, string(b)
	}
	st, body := serve(http.MethodDelete)
	require.Equal(t, http.StatusOK, st, "DELETE: %s", body)
	assert.True(t, ex.PollBackground(), "the run is asked to stop")
	ex.EndBackground(0, nil, true)
	st, body = serve(http.MethodGet)
	assert.Equal(t, http.StatusNotFound, st, "still deleted after the run's last write: %s", body)
}
