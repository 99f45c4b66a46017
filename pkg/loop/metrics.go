package loop

import "github.com/prometheus/client_golang/prometheus"

// engineMetrics are the loop's Prometheus metrics.
type engineMetrics struct {
	runs            *prometheus.CounterVec
	runSeconds      prometheus.Histogram
	followUps       *prometheus.CounterVec
	followUpSeconds prometheus.Histogram
}

func newEngineMetrics() engineMetrics {
	return engineMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codeinterp_loop_code_runs_total",
			Help: "Code runs by result: ok, paused (on the client's tools), not_paused (a resume found no paused run), timeout, lost, unavailable, invalid_arguments, repeat.",
		}, []string{"result"}),
		runSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "codeinterp_loop_code_run_seconds",
			Help:    "Wall-clock time of one code run, including waiting for the sandbox.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		followUps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codeinterp_loop_followups_total",
			Help: "Follow-up model calls by HTTP status, \"error\", or \"retry\" (a connection that could not be made, tried again).",
		}, []string{"status"}),
		followUpSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "codeinterp_loop_followup_seconds",
			Help:    "Time of one follow-up model call.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 10),
		}),
	}
}

func (m engineMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.runs, m.runSeconds, m.followUps, m.followUpSeconds}
}
