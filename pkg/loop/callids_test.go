package loop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// A call the client's stream showed while the model wrote it keeps the item id the stream gave
// it: the loop asks the exchange for it; the other calls get the loop's own.
func TestStreamedCallKeepsItsID(t *testing.T) {
	f := newFixture(t)
	answers := [][][]byte{upstreamEvents(t, respCall("2", "print(2)", 10)), upstreamEvents(t, respText("3", "Done."))}
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		for _, ev := range answers[min(int(n.Add(1))-1, len(answers)-1)] {
			_, _ = w.Write(ev)
		}
	}))
	t.Cleanup(srv.Close)
	req := f.request(t, respSurface, streamClient, respCall("1", "print(1)", 10))
	req.URL = srv.URL + "/v1/responses"
	res := f.engine.Run(context.Background(), req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)

	first, second := gjson.GetBytes(res.Body, "output.0.id").String(), gjson.GetBytes(res.Body, "output.1.id").String()
	assert.Equal(t, "ci_1", first, "the first answer's call, not streamed, is named by the loop: %s", res.Body)
	assert.True(t, strings.HasPrefix(second, "ci_") && second != "ci_2", "the streamed call keeps the stream's id: %s", res.Body)
	var added []string
	for _, ev := range clientEvents(t, f.stream.Bytes()) {
		if ev.Name == "response.output_item.added" {
			added = append(added, gjson.GetBytes(ev.Data, "item.id").String())
		}
	}
	assert.Equal(t, []string{first, second, gjson.GetBytes(res.Body, "output.2.id").String()}, added, "the items added are the answer's")
}
