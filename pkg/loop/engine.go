package loop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/telemetry"
)

// Sandboxes hands out the sandbox a request's code runs in. *sandbox.Manager implements it.
type Sandboxes interface {
	Acquire(ctx context.Context, r sandbox.AcquireRequest) (*sandbox.Lease, error)
}

// Doer sends one HTTP request. *http.Client implements it.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Config holds the engine's optional settings; the zero value works.
type Config struct {
	// Client sends the follow-up calls. If nil, a client with a keep-alive connection pool is used.
	Client Doer
	// Log receives the engine's logs. If nil, nothing is logged.
	Log *zap.Logger
	// MaxResponseBytes bounds one upstream answer; zero means DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// NewID, if set, returns a new item id with the given prefix (a test seam).
	NewID func(prefix string) string
	// Telemetry, if set, makes the GenAI spans and metrics of each loop (an invoke_agent span,
	// a chat span per upstream round, an execute_tool span per call); nil is off, at no cost.
	Telemetry *telemetry.GenAI
}

// Engine runs loops. It is safe for concurrent use; each Run is independent.
type Engine struct {
	sandboxes Sandboxes
	client    Doer
	transport *http.Transport // owned when Config.Client was nil
	log       *zap.Logger
	maxBody   int64
	newID     func(prefix string) string
	metrics   engineMetrics
	tel       *telemetry.GenAI
}

// New returns an Engine that runs code in sb.
func New(sb Sandboxes, cfg Config) *Engine {
	e := &Engine{
		sandboxes: sb,
		client:    cfg.Client,
		log:       cfg.Log,
		maxBody:   cfg.MaxResponseBytes,
		newID:     cfg.NewID,
		metrics:   newEngineMetrics(),
		tel:       cfg.Telemetry,
	}
	if e.log == nil {
		e.log = zap.NewNop()
	}
	e.log = e.log.Named("loop")
	if e.maxBody == 0 {
		e.maxBody = DefaultMaxResponseBytes
	}
	if e.newID == nil {
		e.newID = schema.NewItemID
	}
	if e.client == nil {
		e.transport = &http.Transport{
			Proxy:       nil, // follow-ups go to the configured upstream, never a proxy from the environment
			DialContext: (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			// Follow-ups go to one host (the local Envoy): its idle pool is the whole pool, so
			// that a round of many concurrent loops reuses the connections of the last one
			// instead of dialing most of them again (under load a dial could take longer than
			// its timeout: the 502s of issue "no tenant can hurt another tenant").
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   1024,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
			ForceAttemptHTTP2:     true,
		}
		e.client = &http.Client{Transport: e.transport}
	}
	return e
}

// Close releases the engine's idle upstream connections.
func (e *Engine) Close() {
	if e.transport != nil {
		e.transport.CloseIdleConnections()
	}
}

// Collectors returns the engine's Prometheus metrics for registration.
func (e *Engine) Collectors() []prometheus.Collector { return e.metrics.collectors() }

// Run runs the loop of one request to its end and returns the client's answer; it never fails
// without an answer: every failure becomes an API-shaped error or a fixed text fed to the model.
// The request's sandbox lease is released before Run returns (an ephemeral sandbox is then deleted
// in the background). ctx bounds the whole loop: its deadline is the loop deadline, and its
// cancellation (the client or Envoy went away) stops the loop at once.
func (e *Engine) Run(ctx context.Context, r Request) Response {
	run := &loopRun{e: e, r: r.withDefaults(e.maxBody), seen: map[string]int{}}
	if e.tel != nil {
		ctx, run.agent = e.tel.StartAgent(ctx, r.Surface, r.Exchange.Request().Body)
	}
	defer run.release()
	res := run.run(ctx)
	run.endStream(ctx, res)
	run.agent.End(string(res.Stop), res.Status, res.Rounds, res.Calls)
	return res
}

// withDefaults returns r with every bound that is zero set to its default (maxBody for
// MaxResponseBytes): the loop resolves them once, here.
func (r Request) withDefaults(maxBody int64) Request {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&r.MaxRounds, DefaultMaxRounds)
	def(&r.OutputLimit, DefaultOutputLimit)
	def(&r.MaxOutputBytes, DefaultMaxOutputBytes)
	def(&r.MaxImages, DefaultMaxImages)
	def(&r.MaxCallsPerTurn, DefaultMaxCallsPerTurn)
	if r.MaxResponseBytes <= 0 {
		r.MaxResponseBytes = maxBody
	}
	if r.MaxInputFileBytes <= 0 {
		r.MaxInputFileBytes = DefaultMaxInputFileBytes
	}
	return r
}

// endStream gives a client's stream that the loop began its last event when the loop ended
// without one (an answer too large to build, an event that could not be encoded): a failure
// the client can read, so that every stream the Sink began ends with Done or Failed. A stream
// nothing was written to, or whose client or Envoy is gone (ctx was cancelled), gets nothing.
func (lr *loopRun) endStream(ctx context.Context, res Response) {
	if lr.r.Sink == nil || !lr.begun || lr.ended || errors.Is(ctx.Err(), context.Canceled) {
		return
	}
	lr.e.log.Warn("stream ended without its last event", zap.String("stop", string(res.Stop)), zap.Int("status", res.Status))
	body := lr.r.Exchange.ErrorBody(&schema.RequestError{Status: http.StatusBadGateway,
		Message: "codeinterp could not finish the answer's event stream.", Code: "stream_failed"})
	if err := lr.r.Sink.Event(schema.Event{Kind: schema.EventFailed, Status: http.StatusBadGateway, Body: body}); err != nil {
		lr.e.log.Debug("end the event stream", zap.Error(err))
	}
}

// loopRun is the state of one Run.
type loopRun struct {
	e     *Engine
	r     Request
	lease *sandbox.Lease
	// seen maps code already run in this request to the round that ran it.
	seen  map[string]int
	calls int
	// outBytes and images are what the runs have shown the client so far (the output budget).
	outBytes, images int
	rounds           []schema.Round
	// pending holds the last round's calls and outputs when the loop stops for a client call.
	pending []store.PendingCall
	// sinkErr is the first error of the Sink: the client is gone, and the loop stops.
	sinkErr error
	// begun reports that the Sink took an event; ended that it took the last one (Done or
	// Failed) without an error.
	begun, ended bool
	// inputsIn is the container the request's InputFiles were copied into, "" before.
	inputsIn string
	// toolsIn is the container the request's CodeTools were defined in, "" before; paused
	// reports that a run paused on them, which ends the loop (StopToolCalls).
	toolsIn string
	paused  bool
	// gone reports that a resume found no paused run (see resume).
	gone bool
	// agent is the loop's invoke_agent span, nil when telemetry is off; chat is the span of
	// the upstream round in progress.
	agent *telemetry.Agent
	chat  *telemetry.Chat
	// startShown is the container whose start (new or pooled) an execute_tool span reported.
	startShown string
}

// emit reports ev to the request's Sink, if it has one.
func (lr *loopRun) emit(ev schema.Event) {
	if lr.r.Sink == nil || lr.sinkErr != nil {
		return
	}
	if err := lr.r.Sink.Event(ev); err != nil {
		lr.e.log.Debug("event sink failed; stopping the loop", zap.Error(err))
		lr.sinkErr = err
		return
	}
	lr.begun = true
	lr.ended = ev.Kind == schema.EventDone || ev.Kind == schema.EventFailed
}

// stopped returns why the loop must stop now (the context's error, or the Sink's), or nil.
func (lr *loopRun) stopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return lr.sinkErr
}

func (lr *loopRun) release() {
	if lr.lease != nil {
		lr.lease.Release()
		lr.lease = nil
	}
}

func (lr *loopRun) run(ctx context.Context) Response {
	r := lr.r
	maxRounds := r.MaxRounds
	x := r.Exchange
	rq := x.Request()
	resp := r.First
	// resumed is round 0's call when the request resumes a paused run (schema.Request.Resume):
	// resumed before anything is sent or shown, it stands for the run of the round's one call.
	var resumed *resumedCall
	if rq.Resume != nil && r.First == nil && r.FirstStream == nil {
		if r.OnLoop != nil {
			r.OnLoop()
		}
		var res Response
		if resumed, res = lr.resume(ctx, rq.Resume); resumed == nil {
			return res
		}
		resp = rq.Resume.Turn
	} else if r.First == nil && r.FirstStream == nil && r.FirstRequest != nil {
		var res Response
		if resp, res = lr.sendFirst(ctx); resp == nil {
			return res
		}
	} else {
		// The first round's call was Envoy's: its span starts when the request went upstream.
		_, lr.chat = lr.agent.StartChat(ctx, 0, r.FirstSent, r.FirstStream != nil)
		lr.chat.Input(rq.Body)
		if r.FirstStream != nil {
			var res Response
			if resp, res = lr.readFirst(ctx); resp == nil {
				lr.chat.End(0, nil, errFirstAnswer)
				return res
			}
		}
		lr.chat.End(http.StatusOK, resp, nil)
	}
	turn, err := x.ParseTurn(resp)
	if err != nil {
		return lr.upstreamGarbage(err)
	}
	lr.emit(schema.Event{Kind: schema.EventRound, Body: resp})
	stop := StopDone
	for round := 0; ; round++ {
		if len(turn.Calls) == 0 {
			lr.rounds = append(lr.rounds, schema.Round{Body: resp})
			break
		}
		if round == 0 && r.OnLoop != nil && resumed == nil {
			r.OnLoop()
		}
		finishing := round+1 >= maxRounds
		var calls []schema.CodeCall
		var outputs []schema.CallOutput
		repeated := false
		if round == 0 && resumed != nil {
			calls, outputs = resumed.show(lr)
		} else {
			calls, outputs, repeated = lr.runCalls(ctx, turn.Calls, round, finishing)
		}
		lr.rounds = append(lr.rounds, schema.Round{Body: resp, Calls: calls})
		if err := lr.stopped(ctx); err != nil {
			stop = ctxStop(err)
			break
		}
		if lr.paused {
			// The code awaits the client's tools: the answer asks for their results.
			stop = StopToolCalls
			break
		}
		if turn.ClientCalls > 0 {
			// The client's own calls are pending: it gets the answer now and replays our items.
			stop = StopClientCall
			lr.keepPending(turn.Calls, outputs)
			break
		}
		finishing = finishing || repeated
		_, canStream := x.(schema.StreamReader)
		next, err := x.FollowUp(outputs, schema.FollowUpOptions{
			DropToolChoice: rq.ForcedChoice,
			ToolChoice:     rq.LaterChoice,
			ToolChoiceNone: finishing,
			Stream:         rq.Stream && canStream,
		})
		if err != nil {
			lr.e.log.Error("build follow-up", zap.Error(err))
			return lr.errorResponse(http.StatusBadGateway, "codeinterp could not build the follow-up request from the model's answer.", "followup_failed", StopUpstreamError)
		}
		status, header, body, err := lr.post(ctx, next, round+1, rq.Stream && canStream)
		if err != nil {
			if stopErr := lr.stopped(ctx); stopErr != nil {
				stop = ctxStop(stopErr)
				break
			}
			if errors.Is(err, errBadStream) {
				lr.e.log.Warn("upstream answer stream is malformed", zap.Error(err))
				return lr.errorResponse(http.StatusBadGateway, "The model's answer stream is malformed.", "upstream_invalid_stream", StopUpstreamError)
			}
			// The error names addresses: the log gets it, the client a fixed text.
			lr.e.log.Warn("follow-up call failed", zap.Error(err))
			return lr.errorResponse(http.StatusBadGateway, "The follow-up call to the model failed.", "upstream_unreachable", StopUpstreamError)
		}
		if status != http.StatusOK {
			res := lr.fail(status, x.UpstreamErrorBody(status, body), StopUpstreamError)
			copyErrorHeaders(res.Header, header)
			return res
		}
		resp = body
		if turn, err = x.ParseTurn(resp); err != nil {
			return lr.upstreamGarbage(err)
		}
		lr.emit(schema.Event{Kind: schema.EventRound, Round: round + 1, Body: resp})
		if finishing {
			// The model was told to answer in text; any call it still makes is dropped.
			lr.rounds = append(lr.rounds, schema.Round{Body: resp})
			stop = StopMaxRounds
			if repeated {
				stop = StopRepeat
			}
			break
		}
	}
	if stop == StopCanceled {
		return Response{Status: 499, Header: jsonHeader(), Rounds: lr.sandboxRounds(), Calls: lr.calls, Stop: stop}
	}
	return lr.final(stop)
}

// readFirst reads the first answer from Request.FirstStream: the answer, or nil and the
// client's answer when it could not be read.
func (lr *loopRun) readFirst(ctx context.Context) ([]byte, Response) {
	body, err := lr.readStream(lr.firstChunk(lr.r.FirstStream), lr.limit(), 0)
	switch {
	case err == nil:
		return body, Response{}
	case lr.stopped(ctx) != nil:
		if ctxStop(lr.stopped(ctx)) == StopDeadline {
			return nil, lr.errorResponse(http.StatusGatewayTimeout, "The model's first answer did not arrive within the loop deadline.", "loop_deadline", StopDeadline)
		}
		return nil, Response{Status: 499, Header: jsonHeader(), Stop: StopCanceled}
	case errors.Is(err, errBadStream):
		lr.e.log.Warn("upstream answer stream is malformed", zap.Error(err))
		return nil, lr.errorResponse(http.StatusBadGateway, "The model's answer stream is malformed.", "upstream_invalid_stream", StopUpstreamError)
	default:
		lr.e.log.Warn("read the first answer stream", zap.Error(err))
		return nil, lr.errorResponse(http.StatusBadGateway, "The model's answer stream broke off.", "upstream_unreachable", StopUpstreamError)
	}
}

// sendFirst sends the first round itself (Request.FirstRequest), as it sends a follow-up:
// the answer, or nil and the client's answer when the round failed.
func (lr *loopRun) sendFirst(ctx context.Context) ([]byte, Response) {
	status, header, body, err := lr.post(ctx, lr.r.FirstRequest, 0, false)
	switch {
	case err != nil && lr.stopped(ctx) != nil:
		if ctxStop(lr.stopped(ctx)) == StopDeadline {
			return nil, lr.errorResponse(http.StatusGatewayTimeout, "The model's first answer did not arrive within the loop deadline.", "loop_deadline", StopDeadline)
		}
		return nil, Response{Status: 499, Header: jsonHeader(), Stop: StopCanceled}
	case err != nil && errors.Is(err, errBadStream):
		lr.e.log.Warn("upstream answer stream is malformed", zap.Error(err))
		return nil, lr.errorResponse(http.StatusBadGateway, "The model's answer stream is malformed.", "upstream_invalid_stream", StopUpstreamError)
	case err != nil:
		lr.e.log.Warn("first call failed", zap.Error(err))
		return nil, lr.errorResponse(http.StatusBadGateway, "The call to the model failed.", "upstream_unreachable", StopUpstreamError)
	case status != http.StatusOK:
		res := lr.fail(status, lr.r.Exchange.UpstreamErrorBody(status, body), StopUpstreamError)
		copyErrorHeaders(res.Header, header)
		return nil, res
	}
	return body, Response{}
}

// limit is the bound of one upstream answer.
func (lr *loopRun) limit() int64 { return lr.r.MaxResponseBytes }

// keepPending keeps the turn's calls with their outputs for the request that continues from an
// answer that does not show them: one per call id, as in a follow-up (a call whose id repeats
// an earlier one's was not run).
func (lr *loopRun) keepPending(calls []schema.Call, outputs []schema.CallOutput) {
	for i, c := range calls {
		if c.CallID != "" && !errors.Is(c.ArgsErr, schema.ErrDuplicateCallID) {
			lr.pending = append(lr.pending, store.PendingCall{CallID: c.CallID, Arguments: c.Arguments, Output: outputs[i].Output})
		}
	}
}

// final assembles the client's answer from the rounds.
func (lr *loopRun) final(stop StopReason) Response {
	incomplete := ""
	if stop == StopDeadline {
		incomplete = "loop_deadline"
	}
	body, err := lr.r.Exchange.Final(lr.rounds, incomplete)
	if err != nil {
		lr.e.log.Error("assemble final answer", zap.Error(err))
		return lr.errorResponse(http.StatusBadGateway, "codeinterp could not assemble the final answer from the model's answer.", "final_failed", stop)
	}
	if lr.tooLarge(body) {
		return lr.answerTooLarge(len(body))
	}
	res := Response{Status: http.StatusOK, Header: jsonHeader(), Body: body, Rounds: lr.sandboxRounds(), Calls: lr.calls, Stop: stop}
	if stop == StopClientCall {
		res.Pending = lr.pending
	}
	if lr.r.Sink != nil && lr.sinkErr == nil {
		err := lr.r.Sink.Event(schema.Event{Kind: schema.EventDone, Body: body})
		lr.begun, lr.ended = true, err == nil
		if err != nil {
			lr.e.log.Error("encode event stream", zap.Error(err))
			return Response{
				Status: http.StatusBadGateway, Header: jsonHeader(), Rounds: res.Rounds, Calls: res.Calls, Stop: stop,
				Body: lr.r.Exchange.ErrorBody(&schema.RequestError{Status: http.StatusBadGateway, Message: "codeinterp could not encode the answer as an event stream.", Code: "stream_failed"}),
			}
		}
	}
	return res
}

// tooLarge reports whether body exceeds what the answer may have (Request.MaxAnswerBytes).
func (lr *loopRun) tooLarge(body []byte) bool {
	return lr.r.MaxAnswerBytes > 0 && len(body) > lr.r.MaxAnswerBytes
}

// answerTooLarge answers, instead of an assembled answer of size bytes that could not be
// sent, with a 502 in OpenAI's error shape, as plain JSON also to a client that asked for a
// stream (the stream's failure events would repeat the answer).
func (lr *loopRun) answerTooLarge(size int) Response {
	lr.e.log.Error("answer too large to send", zap.Int("bytes", size), zap.Int("limit", lr.r.MaxAnswerBytes),
		zap.Int("calls", lr.calls), zap.Int("images", lr.images), zap.Int("output_bytes", lr.outBytes))
	return Response{
		Status: http.StatusBadGateway, Header: jsonHeader(),
		Body:   lr.r.Exchange.ErrorBody(AnswerTooLarge(size, lr.r.MaxAnswerBytes)),
		Rounds: lr.sandboxRounds(), Calls: lr.calls, Stop: StopAnswerTooLarge,
	}
}

// AnswerTooLarge is the 502 error (code "answer_too_large") that stands for an answer of size
// bytes beyond the limit of what may be sent.
func AnswerTooLarge(size, limit int) *schema.RequestError {
	return &schema.RequestError{
		Status:  http.StatusBadGateway,
		Message: fmt.Sprintf("The answer codeinterp assembled (%d bytes) is larger than the %d bytes it can send. Ask for less output.", size, limit),
		Code:    "answer_too_large",
	}
}

func (lr *loopRun) sandboxRounds() int {
	n := 0
	for _, rd := range lr.rounds {
		if len(rd.Calls) > 0 {
			n++
		}
	}
	return n
}

func (lr *loopRun) upstreamGarbage(err error) Response {
	lr.e.log.Warn("upstream answer is not a JSON object", zap.Error(err))
	return lr.errorResponse(http.StatusBadGateway, "The model's answer is not a JSON object.", "upstream_invalid_json", StopUpstreamError)
}

func (lr *loopRun) errorResponse(status int, message, code string, stop StopReason) Response {
	return lr.fail(status, lr.r.Exchange.ErrorBody(&schema.RequestError{Status: status, Message: message, Code: code}), stop)
}

// fail answers with an error: status and the JSON error body. A client that asked for a stream
// gets it from the Sink as a failure event, with the answer of the rounds so far, as the native
// API reports a failure in the middle of an answer.
func (lr *loopRun) fail(status int, body []byte, stop StopReason) Response {
	if lr.tooLarge(body) {
		// An upstream error's body, passed on, may be larger than what may be sent.
		return lr.answerTooLarge(len(body))
	}
	res := Response{Status: status, Header: jsonHeader(), Body: body, Rounds: lr.sandboxRounds(), Calls: lr.calls, Stop: stop}
	if lr.r.Sink == nil {
		return res
	}
	var partial []byte
	if len(lr.rounds) > 0 {
		var err error
		if partial, err = lr.r.Exchange.Final(lr.rounds, ""); err != nil {
			lr.e.log.Warn("encode failure events", zap.Error(err))
			return res
		}
	}
	lr.emit(schema.Event{Kind: schema.EventFailed, Status: status, Body: body, Partial: partial})
	return res
}

func ctxStop(err error) StopReason {
	if errors.Is(err, context.DeadlineExceeded) {
		return StopDeadline
	}
	return StopCanceled
}

func jsonHeader() http.Header { return http.Header{"Content-Type": {"application/json"}} }

// copyErrorHeaders copies to dst the headers of an upstream error answer that a client's SDK
// acts on: when to retry, the request id to quote, the rate limits.
func copyErrorHeaders(dst, src http.Header) {
	for k, v := range src {
		switch lk := strings.ToLower(k); {
		case lk == "retry-after", lk == "retry-after-ms", lk == "x-should-retry", lk == "x-request-id",
			strings.HasPrefix(lk, "x-ratelimit-"):
			dst[k] = slices.Clone(v)
		}
	}
}

// followUpAttempts bounds the tries of one follow-up call whose connection could not be made.
const followUpAttempts = 3

// post sends one follow-up call and reads its whole answer. A call whose connection could not
// be made (nothing was sent) is tried again on a new connection, up to followUpAttempts in
// all, within ctx. A call on a reused connection that the peer closed before anything was
// written is retried by the transport itself; one that was written whole is not sent again:
// with a conversation or store:true the upstream may have kept it, and a second send would
// append the outputs twice.
func (lr *loopRun) post(ctx context.Context, body []byte, round int, stream bool) (status int, header http.Header, out []byte, err error) {
	ctx, lr.chat = lr.agent.StartChat(ctx, round, time.Time{}, stream)
	lr.chat.Input(body)
	defer func() { lr.chat.End(status, out, err) }()
	for attempt := 1; ; attempt++ {
		status, header, out, err := lr.postOnce(ctx, body, round)
		if err == nil || attempt == followUpAttempts || !dialFailed(err) || ctx.Err() != nil {
			return status, header, out, err
		}
		lr.e.log.Info("follow-up connection failed; trying a new one", zap.Int("attempt", attempt), zap.Error(err))
		lr.e.metrics.followUps.WithLabelValues("retry").Inc()
		timer := time.NewTimer(time.Duration(attempt) * 100 * time.Millisecond)
		select {
		case <-ctx.Done():
			timer.Stop()
			return 0, nil, nil, err
		case <-timer.C:
		}
	}
}

// dialFailed reports whether err is the failure to make a connection, before anything was sent.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// postOnce sends one follow-up call, of the given round, and reads its whole answer. A 200
// answer that is an event stream is read as it arrives (see readStream).
func (lr *loopRun) postOnce(ctx context.Context, body []byte, round int) (int, http.Header, []byte, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, lr.r.URL, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("new request: %w", err)
	}
	req.Header = lr.r.Header.Clone()
	if req.Header == nil {
		req.Header = make(http.Header)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Length", strconv.Itoa(len(body)))
	// The client's own idempotency key is its first call's: a follow-up is another request, and
	// net/http would send one that carries such a key again after it was written whole.
	req.Header.Del("Idempotency-Key")
	req.Header.Del("X-Idempotency-Key")
	// The call continues the trace under its chat span (Envoy's and the model's spans hang there).
	lr.chat.Inject(req.Header)
	resp, err := lr.e.client.Do(req)
	if err != nil {
		lr.e.metrics.followUps.WithLabelValues("error").Inc()
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	limit := lr.limit()
	if resp.StatusCode == http.StatusOK && isEventStream(resp.Header) {
		out, err := lr.readStream(lr.firstChunk(resp.Body), limit, round)
		if err != nil {
			lr.e.metrics.followUps.WithLabelValues("error").Inc()
			return 0, nil, nil, err
		}
		drain(resp.Body)
		lr.e.metrics.followUps.WithLabelValues(strconv.Itoa(resp.StatusCode)).Inc()
		lr.e.metrics.followUpSeconds.Observe(time.Since(start).Seconds())
		return resp.StatusCode, resp.Header, out, nil
	}
	out, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		lr.e.metrics.followUps.WithLabelValues("error").Inc()
		return 0, nil, nil, fmt.Errorf("read answer: %w", err)
	}
	if int64(len(out)) > limit {
		lr.e.metrics.followUps.WithLabelValues("error").Inc()
		return 0, nil, nil, fmt.Errorf("answer exceeds %d bytes", limit)
	}
	lr.e.metrics.followUps.WithLabelValues(strconv.Itoa(resp.StatusCode)).Inc()
	lr.e.metrics.followUpSeconds.Observe(time.Since(start).Seconds())
	return resp.StatusCode, resp.Header, out, nil
}

// drainBytes and drainTime bound what drain reads of an answer's rest.
const (
	drainBytes = 64 << 10
	drainTime  = time.Second
)

// drain reads what is left of a streamed answer after its last event (the end of the
// chunked body, a "[DONE]" line), so that its connection goes back to the pool instead of
// being closed; an answer that keeps going past drainBytes or drainTime is cut.
func drain(body io.ReadCloser) {
	t := time.AfterFunc(drainTime, func() { _ = body.Close() })
	defer t.Stop()
	_, _ = io.CopyN(io.Discard, body, drainBytes)
}

// errFirstAnswer stands for a first answer that could not be read, in its chat span.
var errFirstAnswer = errors.New("first answer not read")

// firstChunk returns r, which notes the first chunk it reads in the round's chat span (the
// time to first chunk of a streamed answer); r itself when telemetry is off.
func (lr *loopRun) firstChunk(r io.Reader) io.Reader {
	if lr.chat == nil {
		return r
	}
	return &chunkReader{r: r, chat: lr.chat}
}

// chunkReader tells its chat span when the first bytes arrive.
type chunkReader struct {
	r    io.Reader
	chat *telemetry.Chat
}

func (c *chunkReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.chat.FirstChunk()
	}
	return n, err
}
