package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// env is one run of a scenario: on a Manager directly, or through a Client of a Server of it.
type env struct {
	svc    sandbox.Service
	m      *sandbox.Manager
	p      *sandboxtest.Provider
	n      namer
	leases map[string]*sandbox.Lease
	ids    map[string]string // container ids by label
	files  map[string]string // file ids by label
}

// neverIssued is a container id no Manager issued.
const neverIssued = "cntr_00000000000000000000000000000000"

// id returns the container id labelled label, or label itself when it is an id.
func (e *env) id(label string) string {
	if strings.HasPrefix(label, "cntr_") {
		return label
	}
	return e.ids[label]
}

// step is one call of a scenario; what it returns is compared between the two runs, and with
// want when set.
type step struct {
	name string
	do   func(ctx context.Context, e *env) any
	want any
}

type scenario struct {
	name  string
	cfg   sandbox.ManagerConfig
	setup func(p *sandboxtest.Provider)
	steps []step
}

type leaseOut struct {
	ContainerID string
	Err         *errOut
}

type runOut struct {
	Result      sandbox.Result
	Err         *errOut
	ContainerID string
}

type putOut struct {
	File fileOut
	Err  *errOut
}

func acquire(label string, r sandbox.AcquireRequest, cntr string) step {
	return step{name: "acquire " + label, do: func(ctx context.Context, e *env) any {
		if cntr != "" {
			r.ContainerID = e.id(cntr)
		}
		l, err := e.svc.Acquire(ctx, r)
		if err != nil {
			return leaseOut{Err: e.n.errOf(err)}
		}
		e.leases[label] = l
		e.ids[label] = l.ContainerID()
		return leaseOut{ContainerID: e.n.name(l.ContainerID())}
	}}
}

func run(label, code string, want ...any) step { return runT(label, code, 0, want...) }

// runT is run with a run timeout.
func runT(label, code string, timeout time.Duration, want ...any) step {
	s := step{name: "run " + label + " " + code, do: func(ctx context.Context, e *env) any {
		l := e.leases[label]
		res, err := l.Run(ctx, code, timeout)
		return runOut{Result: e.n.result(res), Err: e.n.errOf(err), ContainerID: e.n.name(l.ContainerID())}
	}}
	if len(want) == 1 {
		s.want = want[0]
	}
	return s
}

func release(label string) step {
	return step{name: "release " + label, do: func(ctx context.Context, e *env) any {
		e.leases[label].Release()
		e.leases[label].Release() // idempotent
		delete(e.leases, label)
		return nil
	}}
}

func create(label string, r sandbox.CreateRequest) step {
	return step{name: "create " + label, do: func(ctx context.Context, e *env) any {
		ci, err := e.svc.Create(ctx, r)
		if err != nil {
			return e.n.errOf(err)
		}
		e.ids[label] = ci.ID
		return e.n.info(ci)
	}}
}

func putFile(cntr, identity, path string, r func() io.Reader, limit int64, fileLabel string) step {
	return step{name: "put " + path + " into " + cntr, do: func(ctx context.Context, e *env) any {
		fi, err := e.svc.PutFile(ctx, identity, e.id(cntr), path, "", r(), limit)
		if err != nil {
			return putOut{Err: e.n.errOf(err)}
		}
		e.files[fileLabel] = fi.ID
		return putOut{File: e.n.file(fi)}
	}}
}

func leasePut(label, path string, r func() io.Reader, limit int64) step {
	return step{name: "lease put " + path + " into " + label, do: func(ctx context.Context, e *env) any {
		l := e.leases[label]
		fi, err := l.PutFile(ctx, path, sandbox.SourceAssistant, r(), limit)
		if err != nil {
			return []any{putOut{Err: e.n.errOf(err)}, e.n.name(l.ContainerID())}
		}
		return []any{putOut{File: e.n.file(fi)}, e.n.name(l.ContainerID())}
	}}
}

// want sets s's expected outcome.
func want(s step, w any) step {
	s.want = w
	return s
}

func text(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }

func call(name string, f func(ctx context.Context, e *env) any) step { return step{name: name, do: f} }

// bigFile is a file of several chunks, with a partial last chunk.
var bigFile = func() []byte {
	b := make([]byte, 5<<20+12345)
	_, _ = rand.Read(b)
	return b
}()

var scenarios = []scenario{
	{
		name: "a session keeps its state between leases",
		steps: []step{
			acquire("a", sandbox.AcquireRequest{Identity: "alice", Session: "s1"}, ""),
			run("a", "x=41"),
			run("a", "x", runOut{Result: sandbox.Result{Value: "41"}, ContainerID: "cntr#0"}),
			release("a"),
			acquire("b", sandbox.AcquireRequest{Identity: "alice", Session: "s1"}, ""),
			run("b", "x"),
			acquire("c", sandbox.AcquireRequest{Identity: "alice"}, "b"),
			run("c", "x"),
			call("known", func(_ context.Context, e *env) any {
				return []bool{e.svc.Known("alice", e.ids["b"]), e.svc.Known("bob", e.ids["b"]), e.svc.Known("alice", "cntr_0123")}
			}),
			release("b"),
			release("c"),
			acquire("bob", sandbox.AcquireRequest{Identity: "bob"}, "b"),
		},
	},
	{
		name: "an ephemeral container goes with its last lease",
		steps: []step{
			acquire("a", sandbox.AcquireRequest{}, ""),
			run("a", "y=1"),
			release("a"),
			acquire("expired", sandbox.AcquireRequest{}, "a"),
			call("deleted", func(_ context.Context, e *env) any {
				for range 1000 {
					if e.p.Deleted() == 1 {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				return e.p.Deleted()
			}),
		},
	},
	{
		name: "a lost container is replaced, with a new id",
		setup: func(p *sandboxtest.Provider) {
			p.Run = func(ctx context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
				switch code {
				case "die":
					c.Kill()
					return sandbox.Result{Stdout: "partial"}, fmt.Errorf("%w: killed", sandbox.ErrLost)
				case "hang":
					c.Kill()
					return sandbox.Result{Stdout: "slow"}, fmt.Errorf("%w (%w): killed at the deadline", sandbox.ErrTimeout, sandbox.ErrLost)
				case "slow":
					return sandbox.Result{Stderr: "interrupted"}, fmt.Errorf("%w: interrupted", sandbox.ErrTimeout)
				case "sleep":
					<-ctx.Done()
					if errors.Is(ctx.Err(), context.DeadlineExceeded) {
						return sandbox.Result{Stdout: "zz"}, fmt.Errorf("%w: stopped at the deadline", sandbox.ErrTimeout)
					}
					return sandbox.Result{}, ctx.Err()
				case "boom":
					return sandbox.Result{Error: &sandbox.Error{Name: "ZeroDivisionError", Value: "division by zero", Traceback: "tb"},
						Images: []sandbox.Image{{PNG: []byte("\x89PNG")}}, Truncated: true, FilesNote: "[note]"}, nil
				}
				return c.Eval(code), nil
			}
		},
		steps: []step{
			acquire("a", sandbox.AcquireRequest{Identity: "alice", Session: "s"}, ""),
			run("a", "x=1"),
			run("a", "boom"),
			run("a", "slow"),
			want(call("run to the caller's deadline", func(ctx context.Context, e *env) any {
				ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				res, err := e.leases["a"].Run(ctx, "sleep", time.Minute)
				return runOut{Result: e.n.result(res), Err: e.n.errOf(err)}
			}), runOut{Result: sandbox.Result{Stdout: "zz"}, Err: &errOut{
				Matches: []string{"timeout"}, Text: "sandbox run timed out: stopped at the deadline",
			}}),
			want(call("run cancelled", func(ctx context.Context, e *env) any {
				ctx, cancel := context.WithCancel(ctx)
				time.AfterFunc(100*time.Millisecond, cancel)
				res, err := e.leases["a"].Run(ctx, "sleep", time.Minute)
				return runOut{Result: e.n.result(res), Err: &errOut{Matches: e.n.errOf(err).Matches}}
			}), runOut{Err: &errOut{Matches: []string{"canceled"}}}),
			run("a", "die", runOut{Result: sandbox.Result{Stdout: "partial"},
				Err: &errOut{Matches: []string{"lost"}, Text: "sandbox lost: killed"}, ContainerID: "cntr#0"}),
			run("a", "x"),
			run("a", "hang"),
			run("a", "x", runOut{ContainerID: "cntr#2"}),
			call("kill idle", func(_ context.Context, e *env) any { e.p.Container(e.p.Created() - 1).Kill(); return nil }),
			leasePut("a", "/mnt/data/after.txt", text("kept"), 0),
			run("a", "write /mnt/data/out.txt hi"),
			call("container of a lost one", func(ctx context.Context, e *env) any {
				ci, err := e.svc.Container(ctx, "alice", e.ids["a"])
				return []any{e.n.info(ci), e.n.errOf(err)}
			}),
			release("a"),
		},
	},
	{
		name: "caps",
		cfg:  sandbox.ManagerConfig{MaxContainers: 2, MaxContainersPerIdentity: 1, MaxSessionsPerIdentity: 1},
		steps: []step{
			acquire("a", sandbox.AcquireRequest{Identity: "alice"}, ""),
			want(acquire("a2", sandbox.AcquireRequest{Identity: "alice"}, ""), leaseOut{Err: &errOut{
				Matches: []string{"unavailable", "at_capacity"},
				Text:    "sandbox unavailable: at capacity: all 1 lasting containers of this identity are in use",
			}}),
			create("c", sandbox.CreateRequest{Identity: "alice"}),
			acquire("b", sandbox.AcquireRequest{Identity: "bob"}, ""),
			acquire("e", sandbox.AcquireRequest{}, ""),
			release("a"),
			acquire("a3", sandbox.AcquireRequest{Identity: "alice"}, ""),
			acquire("old", sandbox.AcquireRequest{Identity: "alice"}, "a"),
			create("anon", sandbox.CreateRequest{}),
		},
	},
	{
		name: "files in and out",
		steps: []step{
			create("c", sandbox.CreateRequest{Identity: "alice", Name: "box", ExpiresAfter: time.Hour, Spec: sandbox.Spec{MemoryLimit: "4g"}}),
			call("container", func(ctx context.Context, e *env) any {
				ci, err := e.svc.Container(ctx, "alice", e.ids["c"])
				return []any{e.n.info(ci), e.n.errOf(err)}
			}),
			call("files of a new container", func(ctx context.Context, e *env) any {
				fis, err := e.svc.Files(ctx, "alice", e.ids["c"])
				return []any{fis, fis == nil, e.n.errOf(err)}
			}),
			putFile("c", "alice", "in.txt", text("hello"), 0, "in"),
			putFile("c", "alice", "/mnt/data/big.bin", func() io.Reader { return bytes.NewReader(bigFile) }, 0, "big"),
			putFile("c", "alice", "/etc/passwd", text("x"), 0, ""),
			putFile("c", "alice", "/mnt/data/too.txt", text("four"), 3, ""),
			putFile("c", "alice", "/mnt/data/empty.txt", text(""), 0, "empty"),
			want(putFile("c", "alice", "/mnt/data/broken.txt", func() io.Reader {
				return &failingReader{data: bytes.Repeat([]byte("a"), 100<<10), err: errSource}
			}, 0, ""), putOut{Err: &errOut{Matches: []string{"source"}, Text: "write container file: the source broke"}}),
			putFile("c", "alice", "/mnt/data/lostsrc.txt", func() io.Reader {
				return &failingReader{err: fmt.Errorf("%w: the other container", sandbox.ErrLost)}
			}, 0, ""),
			putFile("c", "bob", "/mnt/data/x.txt", text("x"), 0, ""),
			putFile(neverIssued, "alice", "/mnt/data/x.txt", text("x"), 0, ""),
			call("files", func(ctx context.Context, e *env) any {
				fis, err := e.svc.Files(ctx, "alice", e.ids["c"])
				out := []any{e.n.errOf(err)}
				for _, fi := range fis {
					out = append(out, e.n.file(fi))
				}
				return out
			}),
			call("read back", func(ctx context.Context, e *env) any {
				var out []any
				for _, f := range []string{"in", "big", "empty"} {
					rc, fi, err := e.svc.OpenFile(ctx, "alice", e.ids["c"], e.files[f])
					if err != nil {
						out = append(out, e.n.errOf(err))
						continue
					}
					out = append(out, e.n.file(fi), e.n.read(rc))
				}
				return out
			}),
			call("read unknown", func(ctx context.Context, e *env) any {
				_, _, err1 := e.svc.OpenFile(ctx, "alice", e.ids["c"], "cfile_00000000000000000000000000000000")
				_, _, err2 := e.svc.OpenFile(ctx, "bob", e.ids["c"], e.files["in"])
				_, err3 := e.svc.File(ctx, "alice", e.ids["c"], "cfile_0")
				return []any{e.n.errOf(err1), e.n.errOf(err2), e.n.errOf(err3)}
			}),
			acquire("a", sandbox.AcquireRequest{Identity: "alice"}, "c"),
			run("a", "write /mnt/data/out.csv a,b"),
			leasePut("a", "/mnt/data/lease.txt", text("by lease"), 0),
			leasePut("a", "../x", text("no"), 0),
			leasePut("a", "/mnt/data/src.txt", func() io.Reader { return &failingReader{err: errSource} }, 0),
			run("a", "remove /mnt/data/in.txt"),
			call("file removed by code", func(ctx context.Context, e *env) any {
				fi, err := e.svc.File(ctx, "alice", e.ids["c"], e.files["in"])
				return []any{e.n.file(fi), e.n.errOf(err)}
			}),
			call("delete file", func(ctx context.Context, e *env) any {
				err1 := e.svc.DeleteFile(ctx, "alice", e.ids["c"], e.files["empty"])
				err2 := e.svc.DeleteFile(ctx, "alice", e.ids["c"], e.files["empty"])
				return []any{e.n.errOf(err1), e.n.errOf(err2)}
			}),
			call("list", func(ctx context.Context, e *env) any {
				var out []any
				for _, id := range []string{"alice", "bob", ""} {
					cis, err := e.svc.Containers(ctx, id)
					out = append(out, cis == nil, e.n.errOf(err))
					for _, ci := range cis {
						out = append(out, e.n.info(ci))
					}
				}
				return out
			}),
			release("a"),
			call("files after", func(ctx context.Context, e *env) any {
				fis, err := e.svc.Files(ctx, "alice", e.ids["c"])
				out := []any{e.n.errOf(err)}
				for _, fi := range fis {
					out = append(out, e.n.file(fi))
				}
				return out
			}),
			call("delete container", func(ctx context.Context, e *env) any {
				err1 := e.svc.DeleteContainer(ctx, "bob", e.ids["c"])
				err2 := e.svc.DeleteContainer(ctx, "alice", e.ids["c"])
				err3 := e.svc.DeleteContainer(ctx, "alice", e.ids["c"])
				ci, err4 := e.svc.Container(ctx, "alice", e.ids["c"])
				_, err5 := e.svc.Files(ctx, "alice", e.ids["c"])
				return []any{e.n.errOf(err1), e.n.errOf(err2), e.n.errOf(err3), e.n.info(ci), e.n.errOf(err4), e.n.errOf(err5),
					e.svc.Known("alice", e.ids["c"])}
			}),
			acquire("gone", sandbox.AcquireRequest{Identity: "alice"}, "c"),
			acquire("never", sandbox.AcquireRequest{Identity: "alice"}, neverIssued),
			call("spec", func(_ context.Context, e *env) any {
				return e.n.errOf(e.svc.CheckSpec(sandbox.Spec{MemoryLimit: "64g"}))
			}),
		},
	},
	{
		name:  "no file access",
		setup: func(p *sandboxtest.Provider) { p.NoFileAccess = true },
		steps: []step{
			create("c", sandbox.CreateRequest{Identity: "alice"}),
			putFile("c", "alice", "/mnt/data/x.txt", text("x"), 0, ""),
		},
	},
	{
		name:  "the backend fails to start containers",
		setup: func(p *sandboxtest.Provider) { p.FailCreate(fmt.Errorf("%w: no room", sandbox.ErrUnavailable)) },
		steps: []step{
			acquire("a", sandbox.AcquireRequest{Identity: "alice"}, ""),
			run("a", "x"),
			create("c", sandbox.CreateRequest{Identity: "alice"}),
			putFile("c", "alice", "/mnt/data/x.txt", text("x"), 0, ""),
			release("a"),
		},
	},
	{
		name: "a closed manager",
		steps: []step{
			acquire("a", sandbox.AcquireRequest{Identity: "alice"}, ""),
			call("close", func(ctx context.Context, e *env) any { return e.n.errOf(e.m.Close(ctx)) }),
			run("a", "x"),
			acquire("b", sandbox.AcquireRequest{Identity: "alice"}, ""),
			create("c", sandbox.CreateRequest{Identity: "alice"}),
			call("list", func(ctx context.Context, e *env) any {
				_, err := e.svc.Containers(ctx, "alice")
				return e.n.errOf(err)
			}),
			release("a"),
		},
	},
}

// runScenario runs sc on a new Manager, through a Client when remote, and returns what each
// step returned.
func runScenario(t *testing.T, sc scenario, remote bool) []any {
	p := &sandboxtest.Provider{}
	if sc.setup != nil {
		sc.setup(p)
	}
	m := sandbox.NewManager(p, sc.cfg, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	e := &env{svc: m, m: m, p: p, n: namer{}, leases: map[string]*sandbox.Lease{}, ids: map[string]string{}, files: map[string]string{}}
	if remote {
		e.svc = serve(t, m, ServerOptions{}, ClientOptions{}).client
	}
	ctx := t.Context()
	var out []any
	for _, s := range sc.steps {
		got := s.do(ctx, e)
		if s.want != nil {
			assert.Equal(t, s.want, got, "%s (remote %v)", s.name, remote)
		}
		out = append(out, got)
	}
	for _, k := range sortedKeys(e.leases) {
		e.leases[k].Release()
	}
	return out
}

// TestSameAsManager runs each scenario on a Manager, and through a Client of a Server of
// another: every step must return the same.
func TestSameAsManager(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			direct := runScenario(t, sc, false)
			remote := runScenario(t, sc, true)
			require.Len(t, remote, len(direct), "steps")
			for i, s := range sc.steps {
				assert.Equal(t, direct[i], remote[i], "step %d: %s", i, s.name)
			}
		})
	}
}
