package sandbox

// Hooks for the tests of package sandbox_test.

// RefillDelay is how long the pool filler waits after a hand-out.
const RefillDelay = refillDelay

// EvictForTest removes the lease's current container as an eviction while it is idle would,
// and returns a function reporting a late failure of that container's last run, as a run that
// ended after the eviction would.
func (ll *Lease) EvictForTest() (lateFailure func(error)) {
	l := ll.b.(*localLease)
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	old, oldC := l.e, l.e.c
	m.removeLocked(old)
	return func(err error) { m.afterRun(old, oldC, err) }
}
