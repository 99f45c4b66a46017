package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Twin tests of FULL_DUPLEX_STREAMED (docs/envoy-rules.md, part two) reached the way the codeinterp
// server reaches it (FD §11, design B): the filter config is the shipped one (BUFFERED bodies,
// allow_mode_override), and the server answers response_headers with a mode_override to
// FULL_DUPLEX_STREAMED, a content-type of its own and content-length removed; it then gets the
// upstream body and emits chunks as streamed_response at its own pace.
//
// The client, the server's script and the upstream of a case share named events (fdEvents):
// the client reports each event ("data: ...\n\n") it read, so the script sends chunk i+1 only
// once the client has chunk i (a front that held chunks back would stall the case); the
// script tells a paced upstream when to send its body.

// fdMode is the switch: the response body FULL_DUPLEX_STREAMED, trailers SEND (FD §5: body modes
// come from the override, so the request body mode becomes NONE; it is past by then).
var fdMode = &extprocv3.ProcessingMode{
	ResponseHeaderMode: extprocv3.ProcessingMode_SEND, ResponseBodyMode: extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	ResponseTrailerMode: extprocv3.ProcessingMode_SEND,
}

// fdMerged is fdMode merged into the shipped processing_mode, as allowed_override_modes must
// list it.
var fdMerged = &extprocv3.ProcessingMode{
	RequestHeaderMode: extprocv3.ProcessingMode_SEND, RequestBodyMode: extprocv3.ProcessingMode_NONE,
	RequestTrailerMode: extprocv3.ProcessingMode_SKIP, ResponseHeaderMode: extprocv3.ProcessingMode_SEND,
	ResponseBodyMode: extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseTrailerMode: extprocv3.ProcessingMode_SEND,
}

// sseHeaders is what the switching headers answer does to the response headers.
func sseHeaders() *extprocsvc.HeaderMutation {
	return &extprocsvc.HeaderMutation{
		SetHeaders:    setHeaders(setRaw("content-type", "text/event-stream"), setRaw("cache-control", "no-cache")).SetHeaders,
		RemoveHeaders: []string{"content-length"},
	}
}

// streamed is a response_body answer carrying a streamed_response.
func streamed(body string, eos bool) *extprocsvc.ProcessingResponse {
	return respBody(&extprocsvc.CommonResponse{BodyMutation: &extprocsvc.BodyMutation{
		Mutation: &extprocsvc.BodyMutation_StreamedResponse{StreamedResponse: &extprocsvc.StreamedBodyResponse{Body: []byte(body), EndOfStream: eos}},
	}})
}

// event is the i-th SSE event the scripts send.
func event(i int) string { return "data: " + strconv.Itoa(i) + "\n\n" }

// --- Events shared by a case's client, script and upstream --------------------------------

// fdEvents are named one-shot events. The client resets them before each front's request, so
// a front's run never sees the events of the run before.
type fdEvents struct {
	mu  sync.Mutex
	chs map[string]chan struct{}
}

func newFDEvents() *fdEvents { return &fdEvents{chs: map[string]chan struct{}{}} }

func (e *fdEvents) ch(name string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.chs[name]
	if !ok {
		ch = make(chan struct{})
		e.chs[name] = ch
	}
	return ch
}

// fire marks name as happened; firing twice is fine.
func (e *fdEvents) fire(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.chs[name]
	if !ok {
		ch = make(chan struct{})
		e.chs[name] = ch
	}
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// wait blocks until name happened (true), ctx is done or d passed (false).
func (e *fdEvents) wait(ctx context.Context, name string, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-e.ch(name):
		return true
	case <-ctx.Done():
	case <-timer.C:
	}
	return false
}

func (e *fdEvents) reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.chs = map[string]chan struct{}{}
}

// fdWait is how long a script or upstream waits for an event before giving up (the case then
// fails on its outcome).
const fdWait = 5 * time.Second

// --- Client -------------------------------------------------------------------------------

// fdClient posts the default request on a fresh connection, fires "headers" when the response
// headers arrive and "read i" once it has read the i-th event of the body; after stopAfter
// events (0: read to the end) it closes the connection, as a client that goes away. It
// returns what it read; err is set when the body ended in an error.
func fdClient(ev *fdEvents, stopAfter int) func(t *testing.T, front Front) result {
	return func(t *testing.T, front Front) result {
		ev.reset()
		req, err := http.NewRequest(http.MethodPost, front.URL()+"/v1/responses", strings.NewReader(twinBody))
		require.NoError(t, err, "build request")
		transport := &http.Transport{DisableKeepAlives: true, DisableCompression: true}
		defer transport.CloseIdleConnections()
		resp, err := (&http.Client{Transport: transport, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return result{err: err}
		}
		defer resp.Body.Close()
		ev.fire("headers")
		got := result{status: resp.StatusCode, header: resp.Header}
		br := bufio.NewReader(resp.Body)
		var body strings.Builder
		for i := 0; stopAfter == 0 || i < stopAfter; i++ {
			ev1, err := readEvent(br)
			body.WriteString(ev1)
			if err == io.EOF {
				break
			}
			if err != nil {
				got.err = err
				break
			}
			ev.fire(fmt.Sprintf("read %d", i))
		}
		got.body = body.String()
		return got
	}
}

// readEvent reads up to and including the next blank line (an SSE event's end), or to the
// end of the body.
func readEvent(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String(), err
		}
		if line == "\n" {
			return b.String(), nil
		}
	}
}

// --- Scripts ------------------------------------------------------------------------------

// fdServer is a script that answers CONTINUE up to response_headers and answers those with
// the switch; then it hands every later message to body.
type fdServer struct {
	// hold is how long it waits before the switch (Envoy holds the upstream body meanwhile).
	hold time.Duration
	// mode is the mode_override (nil: fdMode); mut the headers answer's mutation.
	mode *extprocv3.ProcessingMode
	mut  *extprocsvc.HeaderMutation
	// switched, when set, runs right after the switch went out.
	switched func(s *procStream)
	// body answers a message (or not); it returns false to end the stream with err (nil: OK).
	body func(s *procStream, req *extprocsvc.ProcessingRequest) (bool, error)
}

func (p fdServer) script() script {
	mode := p.mode
	if mode == nil {
		mode = fdMode
	}
	return answerUntil("response_headers", func(s *procStream, _ *extprocsvc.ProcessingRequest) error {
		if p.hold > 0 && !s.pause(p.hold) {
			return nil
		}
		resp := respHeaders(&extprocsvc.CommonResponse{HeaderMutation: p.mut})
		resp.ModeOverride = mode
		s.send(resp)
		if p.switched != nil {
			p.switched(s)
		}
		for {
			req := s.recv()
			if req == nil {
				return nil
			}
			if more, err := p.body(s, req); !more {
				return err
			}
		}
	})
}

// afterBody is the codeinterp shape (FD §11): the switch after hold, then, once the response
// body has arrived whole, emit, whose error ends the stream (nil: OK).
func afterBody(hold time.Duration, mut *extprocsvc.HeaderMutation, emit func(s *procStream) error) script {
	return fdServer{hold: hold, mut: mut, body: func(s *procStream, req *extprocsvc.ProcessingRequest) (bool, error) {
		if !req.GetResponseBody().GetEndOfStream() {
			return true, nil
		}
		return false, emit(s)
	}}.script()
}

// untilEnd waits for Envoy to end the stream.
func untilEnd(s *procStream) error {
	_ = s.drain()
	return nil
}

// paced sends the events 0..n-1, the last with end_of_stream, each after the client read the
// one before; first, it notes whether the client had the response headers within 300ms of
// the whole body's arrival (it should not: they go out with the first chunk).
func paced(ev *fdEvents, n int) func(s *procStream) error {
	return func(s *procStream) error {
		ctx := s.srv.Context()
		s.note(fmt.Sprintf("client has headers before the first chunk: %v", ev.wait(ctx, "headers", 300*time.Millisecond)))
		for i := range n {
			if i > 0 && !ev.wait(ctx, fmt.Sprintf("read %d", i-1), fdWait) {
				s.note(fmt.Sprintf("client did not read event %d", i-1))
				return nil
			}
			s.send(streamed(event(i), i == n-1))
		}
		return untilEnd(s)
	}
}

// sends answers with resps, in order, and waits for the end.
func sends(resps ...*extprocsvc.ProcessingResponse) func(s *procStream) error {
	return func(s *procStream) error {
		for _, r := range resps {
			s.send(r)
		}
		return untilEnd(s)
	}
}

// firstThen sends event 0, waits for the client to read it, then sends resp.
func firstThen(ev *fdEvents, resp *extprocsvc.ProcessingResponse) func(s *procStream) error {
	return func(s *procStream) error {
		s.send(streamed(event(0), false))
		if !ev.wait(s.srv.Context(), "read 0", fdWait) {
			s.note("client did not read event 0")
			return nil
		}
		s.send(resp)
		return untilEnd(s)
	}
}

// echo answers every response_body message as it comes: its body as an event, and an end
// event with end_of_stream on Envoy's end of stream.
func echo(s *procStream, req *extprocsvc.ProcessingRequest) (bool, error) {
	body := req.GetResponseBody()
	switch {
	case body == nil:
		s.send(cont(req))
	case body.GetEndOfStream():
		s.send(streamed("data: end\n\n", true))
	default:
		s.send(streamed("data: "+string(body.GetBody())+"\n\n", false))
	}
	return true, nil
}

// echoAtEnd is echo that answers nothing before Envoy's end of stream, then every chunk.
func echoAtEnd() func(s *procStream, req *extprocsvc.ProcessingRequest) (bool, error) {
	var held []*extprocsvc.ProcessingRequest
	return func(s *procStream, req *extprocsvc.ProcessingRequest) (bool, error) {
		held = append(held, req)
		if !req.GetResponseBody().GetEndOfStream() {
			return true, nil
		}
		for _, r := range held {
			_, _ = echo(s, r)
		}
		held = nil
		return true, nil
	}
}

// fireAfterGrace fires name 200ms after the switch: a grace period for the front to handle
// the switch before a paced upstream sends its body.
func fireAfterGrace(ev *fdEvents, name string) func(s *procStream) {
	return func(s *procStream) {
		s.pause(200 * time.Millisecond)
		ev.fire(name)
	}
}

// --- Upstreams ------------------------------------------------------------------------------

// pacedUpstream answers 200 text/plain (with content-length, the parts' total) and writes
// each part once its event (ev, by name; "" at once) happened, at most fdWait later.
func pacedUpstream(ev *fdEvents, parts []string, after []string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := 0
		for _, p := range parts {
			n += len(p)
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		for i, p := range parts {
			if after[i] != "" && !ev.wait(r.Context(), after[i], fdWait) {
				return
			}
			_, _ = io.WriteString(w, p)
			_ = rc.Flush()
		}
	}
}

// --- Expected outcomes -----------------------------------------------------------------------

// fdProc is what the server receives when Envoy held the whole upstream body during the
// headers call: one chunk with end_of_stream; then the script's notes.
func fdProc(notes ...string) []string {
	return append([]string{gotReqHeaders, gotReqBody, gotRespHeaders, `response_body "upstream body" eos`}, notes...)
}

const noHeadersYet = "client has headers before the first chunk: false"

// fdStreamed is a streamed answer to the client: 200, SSE headers, no content-length.
func fdStreamed(body string, proc ...string) twinOutcome {
	return twinOutcome{
		status: 200, body: body,
		header:   map[string]string{"content-type": "text/event-stream", "cache-control": "no-cache", "content-length": "", "server": "envoy"},
		upstream: upstreamGot(), proc: proc,
	}
}

// fdFailed is a local reply made while the response headers were held: the client gets it.
func fdFailed(code int, proc ...string) twinOutcome {
	return twinOutcome{status: code, header: map[string]string{"content-length": "0", "content-type": ""}, upstream: upstreamGot(), proc: proc}
}

// fdReset is a response reset after the headers went out with event 0.
func fdReset(proc ...string) twinOutcome {
	return twinOutcome{status: 0, upstream: upstreamGot(), proc: proc}
}

// --- Cases --------------------------------------------------------------------------------

// TestTwinFullDuplex: the switch, the chunks at the server's pace (the headers go out with
// the first), the upstream body arriving after the switch (each chunk goes to the server as
// it comes, its end as an empty chunk of its own; the server ends only after Envoy did; a
// server that ends first ends the response, and the rest never reaches it), and
// content-length: decided under the mode before the switch, so an upstream content-length
// stays unless the server removes it (and one the server sets is dropped).
func TestTwinFullDuplex(t *testing.T) {
	const hold = 300 * time.Millisecond
	evPaced, evLate, evEarly := newFDEvents(), newFDEvents(), newFDEvents()
	keepCL := &extprocsvc.HeaderMutation{SetHeaders: setHeaders(setRaw("content-type", "text/event-stream")).SetHeaders}
	setCL := &extprocsvc.HeaderMutation{SetHeaders: setHeaders(setRaw("content-type", "text/event-stream"), setRaw("content-length", "5")).SetHeaders}
	twoParts := sends(streamed("first, ", false), streamed("second", true))
	withCL := twinOutcome{
		status: 200, body: "first, second", header: map[string]string{"content-type": "text/event-stream", "content-length": "13"},
		upstream: upstreamGot(), proc: fdProc(),
	}
	runTwins(t, []twinCase{
		{
			name: "chunks at the server's pace", script: afterBody(hold, sseHeaders(), paced(evPaced, 3)), send: fdClient(evPaced, 0),
			want: fdStreamed(event(0)+event(1)+event(2), fdProc(noHeadersYet)...),
		},
		{
			name: "body after the switch, end only after Envoy's", send: fdClient(evLate, 0),
			upstream: pacedUpstream(evLate, []string{"upstream ", "body"}, []string{"switched", "read 0"}),
			script:   fdServer{mut: sseHeaders(), switched: fireAfterGrace(evLate, "switched"), body: echo}.script(),
			want: fdStreamed("data: upstream \n\ndata: body\n\ndata: end\n\n",
				gotReqHeaders, gotReqBody, gotRespHeaders, `response_body "upstream "`, `response_body "body"`, `response_body "" eos`),
		},
		{
			// FD §13 left it open: the response ends with the server's end;
			// the HTTP stream is done, so the rest of the upstream body never reaches the
			// server.
			name: "end before Envoy's", send: fdClient(evEarly, 0),
			upstream: pacedUpstream(evEarly, []string{"upstream ", "body"}, []string{"switched", "read 0"}),
			script: fdServer{mut: sseHeaders(), switched: fireAfterGrace(evEarly, "switched"), body: func(s *procStream, _ *extprocsvc.ProcessingRequest) (bool, error) {
				s.send(streamed(event(0), true))
				return false, untilEnd(s)
			}}.script(),
			want: fdStreamed(event(0), gotReqHeaders, gotReqBody, gotRespHeaders, `response_body "upstream "`),
		},
		{name: "content-length left in", script: afterBody(hold, keepCL, twoParts), want: withCL},
		{name: "content-length set by the switch is dropped", script: afterBody(hold, setCL, twoParts), want: withCL},
	})
}

// TestTwinFullDuplexFailures: what the server may not do in FULL_DUPLEX_STREAMED and what it
// costs: a normal body answer is spurious (a 500 while the headers are held; a reset once they
// went out with a chunk); failure_mode_allow does not help once body bytes went to the server
// (they were drained); an ImmediateResponse is a local reply before the first chunk and a
// reset after it; a server that ends its stream without a chunk.
func TestTwinFullDuplexFailures(t *testing.T) {
	const hold = 300 * time.Millisecond
	ev := newFDEvents()
	normal := respBody(&extprocsvc.CommonResponse{BodyMutation: bodyMut("x")})
	denied := immediate(&extprocsvc.ImmediateResponse{Status: httpStatus(403), Body: []byte("nope")})
	fma := Options{FailureModeAllow: ptr(true)}
	on := func(emit func(s *procStream) error) script { return afterBody(hold, sseHeaders(), emit) }
	runTwins(t, []twinCase{
		{name: "normal body mutation", script: on(sends(normal)), want: fdFailed(500, fdProc()...)},
		{name: "empty body answer", script: on(sends(respBody(&extprocsvc.CommonResponse{}))), want: fdFailed(500, fdProc()...)},
		{
			name:   "clear_body",
			script: on(sends(respBody(&extprocsvc.CommonResponse{BodyMutation: &extprocsvc.BodyMutation{Mutation: &extprocsvc.BodyMutation_ClearBody{ClearBody: true}}}))),
			want:   fdFailed(500, fdProc()...),
		},
		{name: "normal body mutation, failure_mode_allow", options: fma, script: on(sends(normal)), want: fdFailed(500, fdProc()...)},
		{name: "normal body mutation after a chunk", script: on(firstThen(ev, normal)), send: fdClient(ev, 0), want: fdReset(fdProc()...)},
		{
			name: "ImmediateResponse before any chunk", script: on(sends(denied)),
			want: twinOutcome{
				status: 403, body: "nope", header: map[string]string{"content-type": "text/plain", "content-length": "4"},
				upstream: upstreamGot(), proc: fdProc(),
			},
		},
		{name: "ImmediateResponse after a chunk", script: on(firstThen(ev, denied)), send: fdClient(ev, 0), want: fdReset(fdProc()...)},
		{
			// The body went to the server and was drained: the client gets the headers and
			// an empty body, chunked.
			name: "stream closed OK without a chunk", script: on(func(*procStream) error { return nil }),
			want: twinOutcome{
				status: 200, header: map[string]string{"content-type": "text/event-stream", "content-length": ""},
				upstream: upstreamGot(), proc: fdProc(),
			},
		},
		{
			name: "stream error without a chunk, failure_mode_allow", options: fma,
			script: on(func(*procStream) error { return status.Error(codes.Internal, "boom") }),
			want:   fdFailed(500, fdProc()...),
		},
	})
}

// TestTwinFullDuplexClientGoesAway: a client that goes away mid-stream ends the server's
// stream (its context is cancelled), so a loop can stop.
func TestTwinFullDuplexClientGoesAway(t *testing.T) {
	ev := newFDEvents()
	emit := func(s *procStream) error {
		s.send(streamed(event(0), false))
		timer := time.NewTimer(fdWait)
		defer timer.Stop()
		select {
		case <-s.srv.Context().Done():
			s.note("stream ended")
		case <-timer.C:
			s.note("stream still open")
		}
		return untilEnd(s)
	}
	runTwins(t, []twinCase{{
		name: "after the first chunk", script: afterBody(300*time.Millisecond, sseHeaders(), emit), send: fdClient(ev, 1),
		want: fdStreamed(event(0), fdProc("stream ended")...),
	}})
}

// TestTwinFullDuplexModes: the switch is a mode_override like any other: allowed_override_modes
// must list the merged mode, else it is ignored and the body comes BUFFERED (the upstream
// sends it in two parts; the server gets one message, and its streamed_response, in BUFFERED,
// changes nothing); message_timeout times the headers message (sent under BUFFERED) but not
// the body.
func TestTwinFullDuplexModes(t *testing.T) {
	allowed := func(modes ...*extprocv3.ProcessingMode) func(*FilterConfig) {
		return func(c *FilterConfig) { c.Filter.AllowedOverrideModes = modes }
	}
	ownMode := func(c *FilterConfig) {
		c.Filter.AllowedOverrideModes = []*extprocv3.ProcessingMode{c.Filter.GetProcessingMode()}
	}
	ev := newFDEvents()
	twoParts := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "13")
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, "upstream ")
		_ = rc.Flush()
		time.Sleep(100 * time.Millisecond)
		_, _ = io.WriteString(w, "body")
	}
	short := Options{MessageTimeout: 200 * time.Millisecond}
	evShort := newFDEvents()
	slowFirst := func(s *procStream, req *extprocsvc.ProcessingRequest) (bool, error) {
		if !req.GetResponseBody().GetEndOfStream() {
			return true, nil
		}
		if !s.pause(600 * time.Millisecond) {
			return false, nil
		}
		s.send(streamed(event(0), true))
		return false, untilEnd(s)
	}
	runTwins(t, []twinCase{
		{
			name: "not in allowed_override_modes", config: ownMode, upstream: twoParts,
			script: afterBody(0, sseHeaders(), sends(streamed(event(0), true))),
			want: twinOutcome{
				status: 200, body: "upstream body",
				header:   map[string]string{"content-type": "text/event-stream", "content-length": ""},
				upstream: upstreamGot(), proc: fdProc(),
			},
		},
		{
			name: "in allowed_override_modes", config: allowed(fdMerged), send: fdClient(ev, 0),
			script: afterBody(300*time.Millisecond, sseHeaders(), paced(ev, 2)),
			want:   fdStreamed(event(0)+event(1), fdProc(noHeadersYet)...),
		},
		{
			// The body comes after the switch, the first chunk 600ms after its end.
			name: "no message_timeout for the body", options: short,
			upstream: pacedUpstream(evShort, []string{"upstream body"}, []string{"switched"}),
			script:   fdServer{mut: sseHeaders(), switched: fireAfterGrace(evShort, "switched"), body: slowFirst}.script(),
			send: func(t *testing.T, front Front) result {
				evShort.reset()
				return twinRequest(t, front, twinCase{})
			},
			want: fdStreamed(event(0), gotReqHeaders, gotReqBody, gotRespHeaders, `response_body "upstream body"`, `response_body "" eos`),
		},
		{
			name: "the headers message is timed", options: short,
			script: afterBody(400*time.Millisecond, sseHeaders(), sends(streamed(event(0), true))),
			want:   twinOutcome{status: 504, header: map[string]string{"content-length": "0", "content-type": ""}, upstream: upstreamGot(), proc: fdProc()[:3]},
		},
	})
}

// TestTwinFullDuplexIdle: stream_idle_timeout (400ms here) in FULL_DUPLEX_STREAMED: every
// injected chunk restarts it, so keep-alive chunks hold a long stream open; silence before
// the first chunk is a 504 straight to the client (the headers are held), after it a reset.
func TestTwinFullDuplexIdle(t *testing.T) {
	idle := Options{StreamIdleTimeout: 400 * time.Millisecond}
	keepAlive := func(s *procStream) error {
		for i := range 5 {
			if i > 0 && !s.pause(250*time.Millisecond) {
				return nil
			}
			s.send(streamed(event(i), i == 4))
		}
		return untilEnd(s)
	}
	silentThen := func(first bool) func(s *procStream) error {
		return func(s *procStream) error {
			if first {
				s.send(streamed(event(0), false))
			}
			if !s.pause(1200 * time.Millisecond) {
				return nil
			}
			s.send(streamed(event(1), true))
			return untilEnd(s)
		}
	}
	runTwins(t, []twinCase{
		{
			name: "keep-alive chunks", options: idle, script: afterBody(150*time.Millisecond, sseHeaders(), keepAlive),
			want: fdStreamed(event(0)+event(1)+event(2)+event(3)+event(4), fdProc()...),
		},
		{
			name: "silence before the first chunk", options: idle, script: afterBody(150*time.Millisecond, sseHeaders(), silentThen(false)),
			want: twinOutcome{
				status: 504, body: "stream timeout", header: map[string]string{"content-type": "text/plain"},
				upstream: upstreamGot(), proc: fdProc(),
			},
		},
		{name: "silence after the first chunk", options: idle, script: afterBody(150*time.Millisecond, sseHeaders(), silentThen(true)), want: fdReset(fdProc()...)},
	})
}

// TestTwinFullDuplexConfigured: the response in FULL_DUPLEX_STREAMED before its headers are
// sent, by a mode_override on request_headers, a per-route processing mode or the filter's
// own: the response_headers message is not timed, content-length is removed from the response
// right after that message (which still shows it), and the body goes to the server while the
// headers answer is pending (each chunk, then the end as an empty one). A filter-level
// FULL_DUPLEX_STREAMED disables mode_override; a per-route one does not.
func TestTwinFullDuplexConfigured(t *testing.T) {
	short := Options{MessageTimeout: 200 * time.Millisecond}
	respFD := &extprocv3.ProcessingMode{
		RequestHeaderMode: extprocv3.ProcessingMode_SEND, RequestBodyMode: extprocv3.ProcessingMode_BUFFERED,
		RequestTrailerMode: extprocv3.ProcessingMode_SKIP, ResponseHeaderMode: extprocv3.ProcessingMode_SEND,
		ResponseBodyMode: extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseTrailerMode: extprocv3.ProcessingMode_SEND,
	}
	static := short
	static.ProcessingMode = respFD
	perRoute := onV1(&extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{Overrides: &extprocv3.ExtProcOverrides{
		ProcessingMode: &extprocv3.ProcessingMode{
			RequestHeaderMode: extprocv3.ProcessingMode_SEND, RequestBodyMode: extprocv3.ProcessingMode_BUFFERED,
			ResponseHeaderMode: extprocv3.ProcessingMode_SEND, ResponseBodyMode: extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		},
	}}})
	buffered := &extprocv3.ProcessingMode{RequestBodyMode: extprocv3.ProcessingMode_BUFFERED, ResponseBodyMode: extprocv3.ProcessingMode_BUFFERED}
	// server answers request_headers with override (or CONTINUE), notes the response body
	// mode of protocol_config, holds the response_headers answer 400ms and echoes the body.
	server := func(override *extprocv3.ProcessingMode) script {
		return func(s *procStream) error {
			for {
				req := s.recv()
				if req == nil {
					return nil
				}
				resp := cont(req)
				switch requestKind(req) {
				case "request_headers":
					s.note("protocol_config response " + req.GetProtocolConfig().GetResponseBodyMode().String())
					resp.ModeOverride = override
				case "response_headers":
					if !s.pause(400 * time.Millisecond) {
						return nil
					}
				case "response_body":
					_, _ = echo(s, req)
					continue
				}
				s.send(resp)
			}
		}
	}
	proc := func(configured string) []string {
		return []string{
			gotReqHeaders, "protocol_config response " + configured, gotReqBody, gotRespHeaders,
			`response_body "upstream body"`, `response_body "" eos`,
		}
	}
	streamedUp := twinOutcome{
		status: 200, body: "data: upstream body\n\ndata: end\n\n",
		header:   map[string]string{"content-type": "text/plain", "content-length": ""},
		upstream: upstreamGot(), proc: proc("BUFFERED"),
	}
	withProc := func(o twinOutcome, p []string) twinOutcome { o.proc = p; return o }
	runTwins(t, []twinCase{
		{name: "mode_override on request_headers", options: short, script: server(respFD), want: streamedUp},
		{name: "per-route", options: short, config: perRoute, script: server(nil), want: withProc(streamedUp, proc("FULL_DUPLEX_STREAMED"))},
		{
			name: "per-route, then a mode_override to BUFFERED", options: short, config: perRoute, script: server(buffered),
			// The override applies (a per-route mode is not the filter's), so the
			// response_headers message is timed, and the answer comes too late.
			want: twinOutcome{
				status: 504, header: map[string]string{"content-type": "", "content-length": "0"}, upstream: upstreamGot(),
				proc: []string{gotReqHeaders, "protocol_config response FULL_DUPLEX_STREAMED", gotReqBody, gotRespHeaders},
			},
		},
		{
			name: "filter-level, a mode_override is ignored", options: static, script: server(buffered),
			want: withProc(streamedUp, proc("FULL_DUPLEX_STREAMED")),
		},
	})
}

// TestTwinHeadersBeforeBody: when no body byte arrived before the headers answer, whether the
// client gets the response headers before any body: the upstream waits up to 500ms for the
// client to have them before it sends its body, and says in the body whether it did. The
// server passes STREAMED chunks on and echoes FULL_DUPLEX_STREAMED ones.
func TestTwinHeadersBeforeBody(t *testing.T) {
	ev := newFDEvents()
	up := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		if ev.wait(r.Context(), "headers", 500*time.Millisecond) {
			_, _ = io.WriteString(w, "client had the headers")
			return
		}
		_, _ = io.WriteString(w, "headers held")
	}
	streamed := onKind("response_headers", func(s *procStream, req *extprocsvc.ProcessingRequest) (bool, error) {
		resp := cont(req)
		resp.ModeOverride = &extprocv3.ProcessingMode{ResponseBodyMode: extprocv3.ProcessingMode_STREAMED}
		s.send(resp)
		return true, nil
	})
	fd := fdServer{body: echo}.script()
	// partUp sends part of its body at once, the rest as up does.
	partUp := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, "part, ")
		_ = rc.Flush()
		if ev.wait(r.Context(), "headers", 500*time.Millisecond) {
			_, _ = io.WriteString(w, "client had the headers")
			return
		}
		_, _ = io.WriteString(w, "headers held")
	}
	runTwins(t, []twinCase{
		{
			name: "STREAMED", script: streamed, upstream: up, send: fdClient(ev, 0),
			want: twinOutcome{
				status: 200, body: "client had the headers", header: map[string]string{"content-type": "text/event-stream"},
				upstream: upstreamGot(),
				proc:     []string{gotReqHeaders, gotReqBody, "response_headers 200", `response_body "client had the headers"`, `response_body "" eos`},
			},
		},
		{
			name: "FULL_DUPLEX_STREAMED", script: fd, upstream: up, send: fdClient(ev, 0),
			want: twinOutcome{
				status: 200, body: "data: client had the headers\n\ndata: end\n\n", header: map[string]string{"content-type": "text/event-stream"},
				upstream: upstreamGot(),
				proc:     []string{gotReqHeaders, gotReqBody, "response_headers 200", `response_body "client had the headers"`, `response_body "" eos`},
			},
		},
		{
			// The server switches 300ms after the first part arrived (Envoy held it), and
			// answers only after the end.
			name: "FULL_DUPLEX_STREAMED, part of the body held", script: fdServer{hold: 300 * time.Millisecond, body: echoAtEnd()}.script(),
			upstream: partUp, send: fdClient(ev, 0),
			want: twinOutcome{
				status: 200, body: "data: part, \n\ndata: client had the headers\n\ndata: end\n\n", header: map[string]string{"content-type": "text/event-stream"},
				upstream: upstreamGot(),
				proc: []string{gotReqHeaders, gotReqBody, "response_headers 200", `response_body "part, "`,
					`response_body "client had the headers"`, `response_body "" eos`},
			},
		},
	})
}

// TestTwinStandaloneModeOverride: a ProcessingResponse with only mode_override, before the
// request_headers answer (the 1.40 API, FD §6). Envoy 1.40 accepts one that
// switches a STREAMED request body to FULL_DUPLEX_STREAMED (request trailers SEND): the
// harness refuses that as request-path FULL_DUPLEX_STREAMED. Any other is spurious, on both
// fronts, as here (the request body kept BUFFERED, the response skipped).
func TestTwinStandaloneModeOverride(t *testing.T) {
	script := onKind("request_headers", func(s *procStream, req *extprocsvc.ProcessingRequest) (bool, error) {
		s.send(&extprocsvc.ProcessingResponse{ModeOverride: &extprocv3.ProcessingMode{
			RequestBodyMode: extprocv3.ProcessingMode_BUFFERED, ResponseHeaderMode: extprocv3.ProcessingMode_SKIP,
		}})
		s.send(cont(req))
		return true, nil
	})
	runTwins(t, []twinCase{{
		name: "other than the request body to FULL_DUPLEX_STREAMED", script: script,
		want: twinOutcome{status: 500, header: map[string]string{"content-length": "0", "content-type": ""}, proc: []string{gotReqHeaders}},
	}})
}

// reqStreamed is a request_body answer carrying a streamed_response.
func reqStreamed(body string, eos bool) *extprocsvc.ProcessingResponse {
	return reqBody(&extprocsvc.CommonResponse{BodyMutation: &extprocsvc.BodyMutation{
		Mutation: &extprocsvc.BodyMutation_StreamedResponse{StreamedResponse: &extprocsvc.StreamedBodyResponse{Body: []byte(body), EndOfStream: eos}},
	}})
}

// TestTwinFullDuplexRequestConfigured: the filter's own processing_mode has the request body
// FULL_DUPLEX_STREAMED (request trailers SEND) and the response BUFFERED: the request body goes
// to the server while the request_headers answer is pending (no message timer runs: the server
// may hold that answer as long as it likes), content-length is removed from the request (the
// server still sees it, and one it sets is dropped), a mode_override is ignored, and a normal
// body answer is spurious (500). The server may echo each chunk at once, or hold the headers
// answer until the whole body is in and then send another body.
func TestTwinFullDuplexRequestConfigured(t *testing.T) {
	reqFD := Options{MessageTimeout: 200 * time.Millisecond, ProcessingMode: &extprocv3.ProcessingMode{
		RequestHeaderMode: extprocv3.ProcessingMode_SEND, RequestBodyMode: extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		RequestTrailerMode: extprocv3.ProcessingMode_SEND, ResponseHeaderMode: extprocv3.ProcessingMode_SEND,
		ResponseBodyMode: extprocv3.ProcessingMode_BUFFERED, ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
	}}
	// echoRequest answers request_headers at once (with override, ignored), every request
	// chunk as a streamed_response with Envoy's end of stream, and the rest CONTINUE.
	echoRequest := func(override *extprocv3.ProcessingMode) script {
		return func(s *procStream) error {
			for {
				req := s.recv()
				if req == nil {
					return nil
				}
				resp := cont(req)
				switch requestKind(req) {
				case "request_headers":
					s.note("protocol_config request " + req.GetProtocolConfig().GetRequestBodyMode().String())
					resp.ModeOverride = override
				case "request_body":
					resp = reqStreamed(string(req.GetRequestBody().GetBody()), req.GetRequestBody().GetEndOfStream())
				}
				s.send(resp)
			}
		}
	}
	// holdRequest holds the request_headers answer 400ms past the body's end, then answers it
	// setting a content-length (dropped) and x-held, and sends a body of its own in two chunks.
	holdRequest := func(s *procStream) error {
		var headers *extprocsvc.ProcessingRequest
		for {
			req := s.recv()
			if req == nil {
				return nil
			}
			switch requestKind(req) {
			case "request_headers":
				headers = req
				continue
			case "request_body":
				if !req.GetRequestBody().GetEndOfStream() {
					continue
				}
				if !s.pause(400 * time.Millisecond) {
					return nil
				}
				s.send(answer(headers, &extprocsvc.CommonResponse{HeaderMutation: setHeaders(setRaw("content-length", "11"), setRaw("x-held", "1"))}))
				s.send(reqStreamed(`{"b":`, false))
				s.send(reqStreamed(`2}`, true))
				continue
			}
			s.send(cont(req))
		}
	}
	upstream := func(body string) []upstreamWant {
		return []upstreamWant{{body: body, header: map[string]string{"content-length": "", "x-forwarded-proto": "http"}}}
	}
	st, body, hdr := unmodified()
	// The body, then its end as an empty chunk of its own (the HTTP/1 codec's message end).
	gotChunks := []string{`request_body "{\"a\":1}"`, `request_body "" eos`}
	gotFD := append([]string{"protocol_config request FULL_DUPLEX_STREAMED"}, gotChunks...)
	runTwins(t, []twinCase{
		{
			name: "echoed", options: reqFD, script: echoRequest(nil),
			want: twinOutcome{status: st, body: body, header: hdr, upstream: upstream(twinBody),
				proc: append([]string{gotReqHeaders}, append(gotFD, gotRespHeaders, gotRespBody)...)},
		},
		{
			name: "a mode_override is ignored", options: reqFD,
			script: echoRequest(&extprocv3.ProcessingMode{RequestBodyMode: extprocv3.ProcessingMode_NONE, ResponseHeaderMode: extprocv3.ProcessingMode_SKIP}),
			want: twinOutcome{status: st, body: body, header: hdr, upstream: upstream(twinBody),
				proc: append([]string{gotReqHeaders}, append(gotFD, gotRespHeaders, gotRespBody)...)},
		},
		{
			name: "headers answer held until the body is in, another body sent", options: reqFD, script: holdRequest,
			want: twinOutcome{status: st, body: body, header: hdr,
				upstream: []upstreamWant{{body: `{"b":2}`, header: map[string]string{"content-length": "", "x-held": "1"}}},
				proc:     append(append([]string{gotReqHeaders}, gotChunks...), gotRespHeaders, gotRespBody)},
		},
		{
			name: "a normal body answer is spurious", options: reqFD,
			script: withCommon("request_body", &extprocsvc.CommonResponse{BodyMutation: bodyMut("{}")}),
			want:   twinOutcome{status: 500, header: map[string]string{"content-length": "0", "content-type": ""}, proc: append([]string{gotReqHeaders}, gotChunks...)},
		},
	})
}
