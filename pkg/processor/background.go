package processor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// This file runs background responses (issue 24: "background": true with the hosted tool):
// the client's request is answered at once with the response at status "queued", and the
// loop runs in the server, detached from it, issuing the first round itself through the
// upstream the follow-ups use. The response's record (status, answer, events, cancellation)
// lives in the store of stored answers, so that any replica sharing it serves GET, the
// resumed stream and cancel; the loop itself runs on the replica that took the request, and
// a restart ends it (the record says failed).

// Background bounds the background responses a Server runs; the zero value uses the
// defaults.
type Background struct {
	// MaxPerIdentity bounds the runs of one caller; zero means DefaultMaxBackgroundPerIdentity.
	MaxPerIdentity int
	// Max bounds the runs in all; zero means DefaultMaxBackground.
	Max int
	// Poll is how often a run reads whether its cancellation was asked for (on any replica)
	// and saves its events, and how often a stream that follows a run reads the record; zero
	// means DefaultBackgroundPoll.
	Poll time.Duration
	// Lease is how long a run's lease lasts from each renewal (every quarter of it, at a Poll):
	// a replica that reads the record of a response still running whose lease has ended (its
	// runner died without shutting down) marks it failed. Zero means DefaultBackgroundLease.
	Lease time.Duration
}

// LiveReadersPerRun is how many readers of running responses' streams (a stored GET
// …?stream=true of a response still running, live or answered whole at its end) one caller may
// have at once per background response it may run: 4 × MaxPerIdentity (32 by default). Each
// reads the record every Poll until the run ends; a caller past it gets a 429. The stream of
// a create with stream: true is bounded by the runs themselves and is not counted.
const LiveReadersPerRun = 4

// Defaults of [Background].
const (
	DefaultMaxBackgroundPerIdentity = 8
	DefaultMaxBackground            = 128
	DefaultBackgroundPoll           = 250 * time.Millisecond
	// DefaultBackgroundLease leaves a run that misses three renewals in a row (2.5 s apart)
	// a further 2.5 s, for a slow store or clocks that differ between replicas, before other
	// replicas call it lost.
	DefaultBackgroundLease = 10 * time.Second
)

// backgroundExchange is an exchange that can run as a background response (the Responses
// surface's): it keeps the response's record in the store of stored answers.
type backgroundExchange interface {
	// Background reports whether the request asked for a background response.
	Background() bool
	// BeginBackground records the response at status queued, with the runner's lease ending
	// lease after now, and returns its id and the client's answer (JSON, or an event stream
	// with stream).
	BeginBackground(p store.Pending, identity string, now time.Time, lease time.Duration) (id string, answer []byte, stream bool)
	// BackgroundRunning records that the loop started.
	BackgroundRunning()
	// BackgroundSink is the loop's Sink: its events are recorded.
	BackgroundSink() schema.Sink
	// PollBackground saves the events recorded, renews the lease when it is due (now is the
	// time) and reports whether the run must stop (cancelled, or marked failed elsewhere after
	// its lease ended).
	PollBackground(now time.Time) bool
	// EndBackground records the loop's end.
	EndBackground(status int, body []byte, cancelled bool)
}

// errCancelled is the cause of a background run's context that its cancellation ended.
var errCancelled = errors.New("background response cancelled")

// runner runs the background responses of a Server: goroutines it owns, bounded per
// identity and in all, ended by stop. Safe for concurrent use.
type runner struct {
	cfg Background
	log *zap.Logger

	// mu guards the fields below.
	mu     sync.Mutex
	closed bool
	ctx    context.Context // the runs' parent, cancelled by stop
	cancel context.CancelCauseFunc
	per    map[string]int                     // places taken (see reserve) by identity
	reads  map[string]int                     // readers following a running response (see follow) by identity
	n      int                                // places taken in all
	runs   map[string]context.CancelCauseFunc // by response id
	wg     sync.WaitGroup
}

func newRunner(cfg Background, log *zap.Logger) *runner {
	if cfg.MaxPerIdentity <= 0 {
		cfg.MaxPerIdentity = DefaultMaxBackgroundPerIdentity
	}
	if cfg.Max <= 0 {
		cfg.Max = DefaultMaxBackground
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultBackgroundPoll
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultBackgroundLease
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	return &runner{cfg: cfg, log: log.Named("background"), ctx: ctx, cancel: cancel, per: map[string]int{}, reads: map[string]int{}, runs: map[string]context.CancelCauseFunc{}}
}

// reserve takes a place for a run of identity; it returns an error naming the bound that
// is reached, or ErrShuttingDown.
func (b *runner) reserve(identity string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return ErrShuttingDown
	case b.per[identity] >= b.cfg.MaxPerIdentity:
		return fmt.Errorf("You have %d background responses in progress, the most this gateway runs for one caller. Wait for one to finish or cancel one.", b.per[identity])
	case b.n >= b.cfg.Max:
		return fmt.Errorf("This gateway runs %d background responses already, the most it runs at once. Try again later.", b.cfg.Max)
	}
	b.per[identity]++
	b.n++
	return nil
}

// follow takes a place for a reader of a running response's stream for identity (see
// LiveReadersPerRun) and returns the func that gives it back (once; later calls do nothing),
// or an error naming the bound that is reached.
func (b *runner) follow(identity string) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reads[identity] >= LiveReadersPerRun*b.cfg.MaxPerIdentity {
		return nil, fmt.Errorf("You are reading %d streams of background responses in progress, the most this gateway serves one caller at once. Close one, or retrieve the response without stream.", b.reads[identity])
	}
	b.reads[identity]++
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.reads[identity]--; b.reads[identity] <= 0 {
				delete(b.reads, identity)
			}
		})
	}, nil
}

// releaseLocked gives back a place reserve took; b.mu is held.
func (b *runner) releaseLocked(identity string) {
	b.n--
	if b.per[identity]--; b.per[identity] <= 0 {
		delete(b.per, identity)
	}
}

// start runs fn for the response id in a goroutine of its own, on a place reserve took for
// identity, with a context that stop or cancel(id) ends (its cause says which) and that
// ends after timeout. It reports false, running nothing and giving the place back, when the
// runner has stopped.
func (b *runner) start(id, identity string, timeout time.Duration, fn func(ctx context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		b.releaseLocked(identity)
		return false
	}
	ctx, cancel := context.WithCancelCause(b.ctx)
	b.runs[id] = cancel
	b.wg.Go(func() {
		defer func() {
			b.mu.Lock()
			delete(b.runs, id)
			b.releaseLocked(identity)
			b.mu.Unlock()
			cancel(nil)
		}()
		tctx, tcancel := context.WithTimeout(ctx, timeout)
		defer tcancel()
		fn(tctx)
	})
	return true
}

// cancelRun ends the run of response id on this replica, if it runs here.
func (b *runner) cancelRun(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.runs[id]; ok {
		c(errCancelled)
	}
}

// running returns the number of runs.
func (b *runner) running() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.runs)
}

// halt refuses new runs and ends every run, without waiting. Idempotent.
func (b *runner) halt() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel(ErrShuttingDown)
}

// stop ends every run (their records say failed) and refuses new ones; it waits for them
// until ctx ends. Idempotent.
func (b *runner) stop(ctx context.Context) error {
	b.halt()
	done := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop background responses: %w", ctx.Err())
	}
}

// StopBackground ends the background responses in progress (each is recorded as failed, its
// sandbox run interrupted) and refuses new ones with a 503; it returns once they have ended,
// or with ctx's error when ctx ends first. [Server.Close] ends them too, without waiting.
func (s *Server) StopBackground(ctx context.Context) error { return s.bg.stop(ctx) }

// BackgroundRunning returns the number of background responses running on this server.
func (s *Server) BackgroundRunning() int { return s.bg.running() }

// startBackground answers a rewritten request that asked for a background response: its
// record is made at status queued and the client gets it at once, while the loop runs in a
// goroutine of the runner, sending the first round itself.
func (st *streamState) startBackground(bx backgroundExchange) *extprocv3.ProcessingResponse {
	p := st.srv.admission.StoredAnswers()
	identity := st.admitted.Identity()
	if p == nil || identity == "" {
		// Nothing is stored for a caller without an identity: its response could not be
		// polled.
		return st.errorAnswer(&schema.RequestError{
			Message: "background: true needs a caller this gateway can tell apart (a credential or an identity header); send the request without background.",
			Param:   "background", Code: "unsupported_parameter",
		}, "codeinterp_background_refused")
	}
	if err := st.srv.bg.reserve(identity); err != nil {
		if errors.Is(err, ErrShuttingDown) {
			return st.errorAnswer(&schema.RequestError{Status: http.StatusServiceUnavailable, Message: "codeinterp is shutting down; try again.", Code: "server_shutting_down"},
				"codeinterp_shutting_down")
		}
		return st.errorAnswer(&schema.RequestError{Status: http.StatusTooManyRequests, Message: err.Error(), Code: "rate_limit_exceeded"},
			"codeinterp_background_limit")
	}
	id, answer, stream := bx.BeginBackground(p, identity, st.srv.now(), st.srv.bg.cfg.Lease)
	req := st.loopRequest(nil)
	req.FirstRequest = st.exchange.Request().Body
	req.FirstSent = time.Time{}
	req.Sink = bx.BackgroundSink()
	ad, srv, surface := st.admitted, st.srv, st.surface
	log := st.logger().With(zap.String("response_id", id))
	run := func(ctx context.Context) {
		bx.BackgroundRunning()
		started := srv.now()
		res, cancelled := srv.runBackground(ctx, bx, req)
		srv.metrics.observeLoop(surface, res, srv.now().Sub(started))
		switch {
		case cancelled:
			log.Debug("background response cancelled")
			bx.EndBackground(res.Status, res.Body, true)
		case errors.Is(context.Cause(ctx), ErrShuttingDown):
			log.Info("background response ended by shutdown", zap.String("stop", string(res.Stop)))
			bx.EndBackground(http.StatusServiceUnavailable, surface.ErrorBody(&schema.RequestError{Status: http.StatusServiceUnavailable,
				Message: "codeinterp shut down before the response was complete.", Code: "server_shutting_down"}), false)
		default:
			log.Debug("background response finished", zap.String("stop", string(res.Stop)), zap.Int("status", res.Status))
			if res.Status == http.StatusOK {
				ad.Accepted()
			}
			ad.Answered(res)
			bx.EndBackground(res.Status, res.Body, false)
		}
	}
	if !st.srv.bg.start(id, identity, st.route.LoopDeadline-st.route.LoopMargin, run) {
		bx.EndBackground(http.StatusServiceUnavailable, st.surface.ErrorBody(&schema.RequestError{Status: http.StatusServiceUnavailable,
			Message: "codeinterp shut down before the response was complete.", Code: "server_shutting_down"}), false)
	}
	st.setOutcome("background")
	if stream && st.canStreamLive() {
		// The client follows the run live: the create goes on upstream, emptied and renamed
		// after the response so that no model answers it, and its answer is replaced by the
		// recorded events as they come (see followLive). A client that goes away leaves the run
		// as it is.
		sf := st.surface
		st.followLive(sf, -1, askAfter("stream=true", func(q string) *admission.StoredAnswer {
			return st.srv.admission.Stored(sf, http.MethodGet, "/"+id, q, nil, st)
		}), nil)
		return liveCreate(pathOnly(st.path) + "/" + id)
	}
	if stream {
		return immediateWith(http.StatusOK, []*corev3.HeaderValueOption{
			setHeader("content-type", "text/event-stream; charset=utf-8"), setHeader("cache-control", "no-cache"),
		}, answer, "codeinterp_background")
	}
	return immediate(http.StatusOK, jsonContentType, answer, "codeinterp_background")
}

// runBackground runs the loop of a background response, reading every Poll whether its
// cancellation was asked for (on this replica or another sharing the store); cancelled
// reports that it was.
func (s *Server) runBackground(ctx context.Context, bx backgroundExchange, req loop.Request) (loop.Response, bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		t := time.NewTicker(s.bg.cfg.Poll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if bx.PollBackground(s.now()) {
					cancel(errCancelled)
					return
				}
			}
		}
	})
	res := s.loop.Run(ctx, req)
	close(done)
	wg.Wait()
	return res, errors.Is(context.Cause(ctx), errCancelled) && res.Stop == loop.StopCanceled
}

// followStored answers a request for the stream of a background response still running:
// it reads the record again every Poll until the response is over (or the loop deadline has
// passed: the client then resumes from the last event it got), then answers with the events.
// Envoy's message timer is extended for the wait.
func (st *streamState) followStored(ans *admission.StoredAnswer, ask func() *admission.StoredAnswer) *extprocv3.ProcessingResponse {
	if !ans.Live {
		return st.storedImmediate(ans)
	}
	wait := st.route.LoopDeadline
	if err := st.send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(wait)}); err != nil {
		st.logger().Debug("extend the message timeout", zap.Error(err))
		return st.storedImmediate(ans)
	}
	// Whether the response ended, the client left or the deadline passed, the client gets
	// what was read last.
	_, _ = st.pollStored(wait-st.route.LoopMargin, func() (bool, error) {
		if next := ask(); next != nil {
			ans = next
		}
		return !ans.Live, nil
	})
	return st.storedImmediate(ans)
}

// cancelledID returns the response id of a POST /v1/responses/{id}/cancel's rest ("/{id}/cancel").
func cancelledID(rest string) (string, bool) {
	id, ok := strings.CutSuffix(strings.TrimPrefix(rest, "/"), "/cancel")
	return id, ok && id != "" && !strings.Contains(id, "/")
}
