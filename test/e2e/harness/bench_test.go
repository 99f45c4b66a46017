package harness

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkBufferedPassThrough measures the harness's own cost for one request through the
// shipped BUFFERED filter (four ext_proc messages) against a do-nothing server and upstream
// on loopback, so end-to-end figures can be read net of it.
func BenchmarkBufferedPassThrough(b *testing.B) {
	proc := newFakeProc(b, passThrough)
	up := newUpstream(b, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	e := start(b, proc, up, Options{NoRecords: true})
	client := e.Client()
	body := strings.Repeat("x", 1024)
	for b.Loop() {
		resp, err := client.Post(e.URL()+"/v1/responses", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatalf("POST: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
