package sandbox

import (
	"time"

	"go.uber.org/zap"
)

// kick asks the pool filler to top the pool up.
func (m *Manager) kick() {
	select {
	case m.refill <- struct{}{}:
	default:
	}
}

// refillDelay is how long the pool filler waits after a hand-out before it starts a
// container: the run that took the warm container comes first, and starting one (with its
// imports) would compete with it for the CPU.
const refillDelay = 100 * time.Millisecond

// fillPool keeps cfg.WarmPool containers ready, creating one at a time, until Close.
func (m *Manager) fillPool() {
	ctx := m.ctx
	backoff := time.Duration(0)
	for first := true; ; first = false {
		select {
		case <-ctx.Done():
			return
		case <-m.refill:
		}
		if !first {
			t := time.NewTimer(refillDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		for {
			m.mu.Lock()
			need := !m.closed && len(m.pool) < m.cfg.WarmPool
			m.mu.Unlock()
			if !need {
				break
			}
			c, err := m.p.Create(ctx, m.poolSpec)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				backoff = min(max(2*backoff, time.Second), 30*time.Second)
				m.log.Warn("start warm container", zap.Error(err), zap.Duration("retry_in", backoff))
				t := time.NewTimer(backoff)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				continue
			}
			backoff = 0
			m.mu.Lock()
			if m.closed {
				m.mu.Unlock()
				m.deleteNow(c)
				return
			}
			m.pool = append(m.pool, c)
			m.mu.Unlock()
		}
	}
}

// takeWarmLocked returns a ready pool container fitting spec, or nil.
func (m *Manager) takeWarmLocked(spec Spec) Container {
	if m.cfg.WarmPool == 0 || spec != m.poolSpec {
		return nil
	}
	for len(m.pool) > 0 {
		c := m.pool[0]
		m.pool = m.pool[1:]
		m.kick()
		if a, ok := c.(aliveChecker); ok && !a.Alive() {
			m.deleteLocked(c)
			continue
		}
		return c
	}
	return nil
}

// pruneEvery is how often the pruner looks for idle containers past their expiry, at most;
// a container is expired at most this late (and on its next use, on time).
const pruneEvery = 10 * time.Second

// prune expires idle lasting containers past their expiry and drops tombstones past
// TombstoneTTL, and with hibernation on hibernates and forgets containers (sweepOnce), until
// Close.
func (m *Manager) prune() {
	every := min(m.cfg.SessionIdleTTL/4, pruneEvery)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case now := <-t.C:
			m.pruneOnce(now)
			if m.hib != nil {
				m.sweepOnce(now)
			}
		}
	}
}

func (m *Manager) pruneOnce(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	for _, e := range m.live {
		if !e.key.lasting() || e.leases > 0 || !m.maybeIdleLocked(e, now) {
			continue
		}
		if r, ok := m.registrationLocked(e); ok && m.idlePastLocked(e, r, now) {
			m.log.Debug("deleting idle container", zap.String("container_id", e.id))
			m.metrics.evictions.WithLabelValues("idle").Inc()
			m.removeLocked(e)
		}
	}
	for _, id := range m.tombs.older(now.Add(-TombstoneTTL)) {
		m.forgetLocked(id)
	}
}

// warmCount returns the number of containers ready in the pool.
func (m *Manager) warmCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pool)
}
