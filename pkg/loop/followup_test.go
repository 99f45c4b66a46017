package loop

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// flakyDialer is a Doer that fails its first failures calls as a connection that could not be
// made (the dial timeout under load behind the 502 of the load test), then sends them.
type flakyDialer struct {
	mu       sync.Mutex
	failures int
	calls    int
	err      error
	next     *http.Client
	headers  []http.Header
}

func (d *flakyDialer) Do(r *http.Request) (*http.Response, error) {
	d.mu.Lock()
	d.calls++
	d.headers = append(d.headers, r.Header.Clone())
	fail := d.calls <= d.failures
	d.mu.Unlock()
	if fail {
		return nil, &url.Error{Op: "Post", URL: r.URL.String(), Err: d.err}
	}
	return d.next.Do(r)
}

func TestFollowUpRetriesAFailedDial(t *testing.T) {
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 10000}, Err: errors.New("i/o timeout")}
	tests := []struct {
		name       string
		failures   int
		err        error
		wantStatus int
		wantCalls  int
	}{
		{name: "one failed dial is tried again", failures: 1, err: dialTimeout, wantStatus: http.StatusOK, wantCalls: 2},
		{name: "two failed dials are tried again", failures: 2, err: dialTimeout, wantStatus: http.StatusOK, wantCalls: 3},
		{name: "a dial that keeps failing ends in a 502", failures: 5, err: dialTimeout, wantStatus: http.StatusBadGateway, wantCalls: followUpAttempts},
		{name: "a failure after the request was sent is not retried", failures: 1, err: errors.New("read: connection reset by peer"), wantStatus: http.StatusBadGateway, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := &fakeModel{answers: []scripted{{status: 200, body: respText("2", "The answer is 42.")}}}
			srv := httptest.NewServer(model)
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			d := &flakyDialer{failures: tt.failures, err: tt.err, next: client}
			mgr := sandbox.NewManager(newFakeProvider(), sandbox.ManagerConfig{}, zaptest.NewLogger(t))
			defer func() { require.NoError(t, mgr.Close(context.Background())) }()
			e := New(mgr, Config{Client: d, Log: zaptest.NewLogger(t)})
			defer e.Close()

			x, err := respSurface.NewExchange([]byte(responsesClient), schema.Options{})
			require.NoError(t, err)
			res := e.Run(context.Background(), Request{
				Exchange: x, URL: srv.URL + "/v1/responses", Header: http.Header{"X-Idempotency-Key": {"client-key"}},
				First:   []byte(respCall("1", "print(40+2)", 10)),
				Sandbox: sandbox.AcquireRequest{Identity: "id-1"},
			})
			assert.Equal(t, tt.wantStatus, res.Status, "%s: status, body %s", tt.name, res.Body)
			assert.Equal(t, tt.wantCalls, d.calls, "%s: follow-up attempts", tt.name)
			assert.NotContains(t, string(res.Body), "127.0.0.1", "%s: the client never sees an address", tt.name)
			for i, h := range d.headers {
				// Not replayable: a follow-up written whole may have been kept upstream.
				_, ok := h["Idempotency-Key"]
				_, xok := h["X-Idempotency-Key"]
				assert.False(t, ok || xok, "%s: attempt %d is not marked replayable (nor carries the client's key)", tt.name, i+1)
			}
		})
	}
}

// A loop given the first round's body (a background response) sends it itself, as it sends
// a follow-up, then loops as it does on Envoy's first answer; the upstream's error on the
// first round is the answer.
func TestFirstRequestIsSentByTheLoop(t *testing.T) {
	tests := []struct {
		name       string
		answers    []scripted
		wantStatus int
		wantCalls  int
	}{
		{name: "the first round asks for code, the second answers", answers: []scripted{
			{status: 200, body: respCall("1", "print(40+2)", 10)}, {status: 200, body: respText("2", "The answer is 42.")},
		}, wantStatus: http.StatusOK, wantCalls: 2},
		{name: "the first round fails", answers: []scripted{
			{status: 429, body: `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`},
		}, wantStatus: http.StatusTooManyRequests, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := &fakeModel{answers: tt.answers}
			srv := httptest.NewServer(model)
			defer srv.Close()
			mgr := sandbox.NewManager(newFakeProvider(), sandbox.ManagerConfig{}, zaptest.NewLogger(t))
			defer func() { require.NoError(t, mgr.Close(context.Background())) }()
			e := New(mgr, Config{Log: zaptest.NewLogger(t)})
			defer e.Close()

			x, err := respSurface.NewExchange([]byte(responsesClient), schema.Options{})
			require.NoError(t, err)
			res := e.Run(context.Background(), Request{
				Exchange: x, URL: srv.URL + "/v1/responses", Header: http.Header{"Authorization": {"Bearer sk-1"}},
				FirstRequest: x.Request().Body,
				Sandbox:      sandbox.AcquireRequest{Identity: "id-1"},
			})
			assert.Equal(t, tt.wantStatus, res.Status, "%s: status, body %s", tt.name, res.Body)
			model.mu.Lock()
			defer model.mu.Unlock()
			require.Len(t, model.bodies, tt.wantCalls, "%s: upstream calls", tt.name)
			assert.Equal(t, string(x.Request().Body), string(model.bodies[0]), "%s: the first round is the rewritten request", tt.name)
			assert.Equal(t, "Bearer sk-1", model.headers[0].Get("Authorization"), "%s: with the caller's credential", tt.name)
		})
	}
}
