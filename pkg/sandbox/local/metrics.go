package local

import "github.com/prometheus/client_golang/prometheus"

// localMetrics are a Local's Prometheus metrics.
type localMetrics struct {
	mode            *prometheus.GaugeVec
	forkUnavailable prometheus.Counter
	fallbacks       prometheus.Counter
}

func newLocalMetrics() localMetrics {
	return localMetrics{
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "codeinterp_sandbox_local_start_mode",
			Help: "1 for how the local backend starts containers: exec (a new bubblewrap and interpreter each) or fork (from a template).",
		}, []string{"mode"}),
		forkUnavailable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codeinterp_sandbox_local_fork_unavailable_total",
			Help: "Start-ups where the fork start mode was asked for but the host did not allow it (containers start the exec way).",
		}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codeinterp_sandbox_local_fork_fallbacks_total",
			Help: "Containers started the exec way in the fork start mode because the template was unavailable (restarting).",
		}),
	}
}

// Collectors returns the Local's metrics for registration: its start mode, and in the fork
// start mode the fallbacks to the exec way and the template's restarts.
func (l *Local) Collectors() []prometheus.Collector {
	restarts := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "codeinterp_sandbox_local_template_restarts_total",
		Help: "Fork templates started again after one died.",
	}, func() float64 {
		if l.tpl == nil {
			return 0
		}
		return float64(l.tpl.restarts.Load())
	})
	return []prometheus.Collector{l.metrics.mode, l.metrics.forkUnavailable, l.metrics.fallbacks, restarts}
}
