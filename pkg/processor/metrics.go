package processor

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// Metrics are the processor's Prometheus metrics. The caller registers them (see Collectors).
type Metrics struct {
	streams     *prometheus.CounterVec
	streamModes *prometheus.CounterVec
	// outcomes caches the streams counter of each known outcome: a label lookup per stream is
	// measurable on the pass-through path.
	outcomes     map[string]prometheus.Counter
	rewrites     *prometheus.CounterVec
	loops        *prometheus.CounterVec
	loopDuration *prometheus.HistogramVec
	loopRounds   *prometheus.HistogramVec
	// panics counts the streams whose handling panicked (see handleSafely).
	panics prometheus.Counter
	// fullDuplex counts the streams whose configured mode has FULL_DUPLEX_STREAMED bodies,
	// by which: request, response or both.
	fullDuplex *prometheus.CounterVec
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		streamModes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codeinterp_streaming_answers_total",
			Help: "Streaming answers that need the loop, by how they reach the client: progressive, or replay_* with the reason.",
		}, []string{"mode"}),
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codeinterp_streams_total",
			Help: "ext_proc streams by outcome (pass_through, plain, follow_up, client_error, done, max_rounds, ...).",
		}, []string{"outcome"}),
		rewrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codeinterp_requests_rewritten_total",
			Help: "Requests whose code_interpreter tool was rewritten, by API surface.",
		}, []string{"surface"}),
		loops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codeinterp_loops_total",
			Help: "Answers of rewritten requests, by API surface and why the loop stopped.",
		}, []string{"surface", "stop"}),
		loopDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "codeinterp_loop_duration_seconds",
			Help:    "Time from the first upstream answer to the final answer, by API surface.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"surface"}),
		loopRounds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "codeinterp_loop_rounds",
			Help:    "Sandbox rounds per answer, by API surface.",
			Buckets: []float64{0, 1, 2, 3, 4, 6, 8, 12, 16},
		}, []string{"surface"}),
		fullDuplex: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codeinterp_configured_full_duplex_streams_total",
			Help: "ext_proc streams whose configured processing mode (Envoy's protocol_config) has a FULL_DUPLEX_STREAMED body, by which: request, response or both. Envoy ignores mode_override on them; the server answers in that mode's shape.",
		}, []string{"body"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codeinterp_stream_panics_total",
			Help: "ext_proc streams whose handling panicked; each was answered as a server error.",
		}),
	}
	m.outcomes = make(map[string]prometheus.Counter)
	for _, o := range []string{"pass_through", "plain", "follow_up", "client_error", "incomplete", "upstream_status",
		"upstream_encoding", "done", "client_call", "max_rounds", "repeat", "deadline", "upstream_error", "canceled", "panic"} {
		m.outcomes[o] = m.streams.WithLabelValues(o)
	}
	return m
}

// streamMode counts one streaming answer by how it reaches the client.
func (m *Metrics) streamMode(mode string) { m.streamModes.WithLabelValues(mode).Inc() }

// configuredFullDuplex counts one stream whose configured mode has FULL_DUPLEX_STREAMED
// bodies ("request", "response" or "both").
func (m *Metrics) configuredFullDuplex(body string) { m.fullDuplex.WithLabelValues(body).Inc() }

// stream counts one ended stream by outcome.
func (m *Metrics) stream(outcome string) {
	if c, ok := m.outcomes[outcome]; ok {
		c.Inc()
		return
	}
	m.streams.WithLabelValues(outcome).Inc()
}

// Collectors returns the metrics for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.streams, m.streamModes, m.rewrites, m.loops, m.loopDuration, m.loopRounds, m.panics, m.fullDuplex}
}

func (m *Metrics) observeLoop(s schema.Surface, r loop.Response, d time.Duration) {
	m.loops.WithLabelValues(s.Name(), string(r.Stop)).Inc()
	m.loopDuration.WithLabelValues(s.Name()).Observe(d.Seconds())
	m.loopRounds.WithLabelValues(s.Name()).Observe(float64(r.Rounds))
}
