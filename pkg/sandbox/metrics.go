package sandbox

import "github.com/prometheus/client_golang/prometheus"

// managerMetrics are the Manager's Prometheus metrics.
type managerMetrics struct {
	starts    *prometheus.CounterVec
	evictions *prometheus.CounterVec
	refusals  *prometheus.CounterVec
}

func newManagerMetrics() managerMetrics {
	return managerMetrics{
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codeinterp_sandbox_starts_total",
			Help: "Containers put to use, by source: warm (from the pool), cold (started on demand) or restored (a hibernated container started again).",
		}, []string{"source"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codeinterp_sandbox_evictions_total",
			Help: "Lasting containers deleted before their owner was done: lru (a cap), idle (expiry), lost (died or was killed), hibernated (idle, its files kept on disk), lifetime (a hibernating container past its lifetime).",
		}, []string{"reason"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codeinterp_sandbox_acquire_failures_total",
			Help: "Acquires refused, by reason: cap (a cap was reached) or unknown_container.",
		}, []string{"reason"}),
	}
}

// Collectors returns the Manager's metrics for registration: the counters above and gauges of
// the containers in use (by kind), ready in the warm pool, and the bytes of the files tables,
// read at scrape time.
func (m *Manager) Collectors() []prometheus.Collector {
	inUse := func(kind keyKind) func() float64 {
		return func() float64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			n := 0
			for _, e := range m.live {
				if e.key.kind == kind {
					n++
				}
			}
			return float64(n)
		}
	}
	return []prometheus.Collector{
		m.metrics.starts, m.metrics.evictions, m.metrics.refusals,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "codeinterp_sandbox_containers",
			Help:        "Containers in use (issued under a key), by kind.",
			ConstLabels: prometheus.Labels{"kind": "session"},
		}, inUse(kindSession)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "codeinterp_sandbox_containers",
			Help:        "Containers in use (issued under a key), by kind.",
			ConstLabels: prometheus.Labels{"kind": "ephemeral"},
		}, inUse(kindEphemeral)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "codeinterp_sandbox_containers",
			Help:        "Containers in use (issued under a key), by kind.",
			ConstLabels: prometheus.Labels{"kind": "kept"},
		}, inUse(kindKept)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "codeinterp_sandbox_warm_containers",
			Help: "Started containers ready in the warm pool.",
		}, func() float64 { return float64(m.warmCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "codeinterp_sandbox_file_table_bytes",
			Help: "Server memory the containers' files tables are charged (ManagerConfig.MaxAllFileTableBytes bounds it).",
		}, func() float64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			return float64(m.allFileBytes)
		}),
	}
}
