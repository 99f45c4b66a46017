package remote

import (
	"context"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/local"
)

// sharedLocal is one bubblewrap backend for the tests and benchmarks that need one: each New
// runs a probe sandbox, which costs a second or more on 2 cores.
var sharedLocal struct {
	once sync.Once
	l    *local.Local
	err  error
}

// bwrapLocal returns the shared Local (TestMain closes it), or skips without bubblewrap.
func bwrapLocal(tb testing.TB) *local.Local {
	tb.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		tb.Skip("bubblewrap is not installed")
	}
	sharedLocal.once.Do(func() { sharedLocal.l, sharedLocal.err = local.New(local.Config{}, zap.NewNop()) })
	require.NoError(tb, sharedLocal.err, "local.New")
	return sharedLocal.l
}

// TestSameAsManagerOverBwrap runs real code in real containers on a Manager and through a
// Client: the same results, files and errors (a *SpecError among them).
func TestSameAsManagerOverBwrap(t *testing.T) {
	l := bwrapLocal(t)
	sc := []step{
		acquire("a", sandbox.AcquireRequest{Identity: "alice", Session: "s"}, ""),
		run("a", "x = 6*7"),
		run("a", "x", runOut{Result: sandbox.Result{Value: "42"}, ContainerID: "cntr#0"}),
		run("a", "print('out'); import sys; print('err', file=sys.stderr); 'v'"),
		run("a", "1/0"),
		run("a", "open('/mnt/data/o.txt', 'w').write('abc')"),
		run("a", "import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()"),
		runT("a", "import time; print('before'); time.sleep(5)", time.Second),
		run("a", "x"),
		call("check specs", func(_ context.Context, e *env) any {
			return []any{e.n.errOf(e.svc.CheckSpec(sandbox.Spec{MemoryLimit: "banana"})), e.n.errOf(e.svc.CheckSpec(sandbox.Spec{MemoryLimit: "1g"}))}
		}),
		call("files", func(ctx context.Context, e *env) any {
			fis, err := e.svc.Files(ctx, "alice", e.ids["a"])
			out := []any{e.n.errOf(err)}
			for _, fi := range fis {
				rc, _, err := e.svc.OpenFile(ctx, "alice", e.ids["a"], fi.ID)
				out = append(out, e.n.file(fi), e.n.errOf(err))
				if err == nil {
					out = append(out, e.n.read(rc))
				}
			}
			return out
		}),
		release("a"),
	}
	runOn := func(remote bool) []any {
		m := sandbox.NewManager(l, sandbox.ManagerConfig{}, zap.NewNop())
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		e := &env{svc: m, m: m, n: namer{}, leases: map[string]*sandbox.Lease{}, ids: map[string]string{}, files: map[string]string{}}
		if remote {
			e.svc = serve(t, m, ServerOptions{}, ClientOptions{}).client
		}
		var out []any
		for _, s := range sc {
			got := s.do(t.Context(), e)
			if s.want != nil {
				assert.Equal(t, s.want, got, "%s (remote %v)", s.name, remote)
			}
			out = append(out, got)
		}
		return out
	}
	direct, remote := runOn(false), runOn(true)
	for i, s := range sc {
		assert.Equal(t, direct[i], remote[i], "step %d: %s", i, s.name)
	}
	spec := direct[9].([]any)[0].(*errOut)
	require.NotNil(t, spec, "an invalid memory limit is refused")
	assert.NotNil(t, spec.Spec, "the refusal is a *SpecError")
	timedOut := direct[7].(runOut)
	require.NotNil(t, timedOut.Err, "a run past its timeout fails")
	assert.Contains(t, timedOut.Err.Matches, "timeout", "a run past its timeout")
	assert.Equal(t, "before\n", timedOut.Result.Stdout, "what it printed before it timed out")
	img := direct[6].(runOut).Result.Images
	assert.Len(t, img, 1, "the figure came back")
}

// BenchmarkRun: a run of a tiny cell in a warm bubblewrap container, on the Manager (local)
// and through a Client over loopback gRPC (remote), back to back in each op so that the
// machine's changing load falls on both alike. added-p50-µs is the median of the paired
// differences: what the sandbox service adds to a run.
func BenchmarkRun(b *testing.B) {
	l := bwrapLocal(b)
	m := sandbox.NewManager(l, sandbox.ManagerConfig{}, zap.NewNop())
	b.Cleanup(func() { _ = m.Close(context.Background()) })
	s := serve(b, m, ServerOptions{}, ClientOptions{})
	ctx := context.Background()
	direct, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "bench", Session: "local"})
	require.NoError(b, err, "Acquire local")
	defer direct.Release()
	remote, err := s.client.Acquire(ctx, sandbox.AcquireRequest{Identity: "bench", Session: "remote"})
	require.NoError(b, err, "Acquire remote")
	defer remote.Release()
	for _, l := range []*sandbox.Lease{direct, remote} {
		_, err := l.Run(ctx, "x = 1", 0) // starts the container
		require.NoError(b, err, "first run")
	}
	var locals, remotes, added []time.Duration
	b.ResetTimer()
	for i := range b.N {
		first, second := direct, remote
		if i%2 == 1 {
			first, second = remote, direct // neither always runs first
		}
		var d [2]time.Duration
		for j, l := range []*sandbox.Lease{first, second} {
			start := time.Now()
			_, err := l.Run(ctx, "x + 1", 0)
			d[j] = time.Since(start)
			if err != nil {
				b.Fatalf("Run: %v", err)
			}
		}
		if i%2 == 1 {
			d[0], d[1] = d[1], d[0]
		}
		locals, remotes, added = append(locals, d[0]), append(remotes, d[1]), append(added, d[1]-d[0])
	}
	b.StopTimer()
	b.ReportMetric(float64(p50(locals).Microseconds()), "local-p50-µs")
	b.ReportMetric(float64(p50(remotes).Microseconds()), "remote-p50-µs")
	b.ReportMetric(float64(p50(added).Microseconds()), "added-p50-µs")
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
