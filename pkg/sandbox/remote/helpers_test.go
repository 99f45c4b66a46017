package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if l := sharedLocal.l; l != nil {
		if err := l.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close the shared Local:", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testSecret is the shared secret of the tests' servers and clients.
var testSecret = []byte("0123456789abcdef0123456789abcdef-test")

// served is a Service served on a loopback listener, and a Client of it.
type served struct {
	srv    *Server
	client *Client
	addr   string
	done   chan error // Serve's return
	once   sync.Once
	served error
}

// serve serves svc on a loopback listener and dials it; both end with the test.
func serve(t testing.TB, svc sandbox.Service, so ServerOptions, co ClientOptions) *served {
	t.Helper()
	if so.Secret == nil {
		so.Secret = testSecret
	}
	if co.Secret == nil {
		co.Secret = testSecret
	}
	if so.Log == nil {
		so.Log = zaptest.NewLogger(t)
	}
	srv, err := NewServer(svc, so)
	require.NoError(t, err, "NewServer")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "listen")
	s := &served{srv: srv, addr: l.Addr().String(), done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(l) }()
	s.client, err = Dial(s.addr, co)
	require.NoError(t, err, "Dial")
	t.Cleanup(func() {
		assert.NoError(t, s.client.Close(), "close the client")
		assert.NoError(t, s.stop(), "Serve")
	})
	return s
}

// restart serves svc at s's address, as a node restarted, and returns it; it stops with the
// test. s must be stopped.
func (s *served) restart(t testing.TB, svc sandbox.Service) *served {
	t.Helper()
	srv, err := NewServer(svc, ServerOptions{Secret: testSecret, Log: zaptest.NewLogger(t)})
	require.NoError(t, err, "NewServer")
	l, err := net.Listen("tcp", s.addr)
	require.NoError(t, err, "listen again at %s", s.addr)
	r := &served{srv: srv, client: s.client, addr: s.addr, done: make(chan error, 1)}
	go func() { r.done <- srv.Serve(l) }()
	t.Cleanup(func() { assert.NoError(t, r.stop(), "Serve") })
	return r
}

// stop stops the server at once, as a node that dies, and waits for Serve, whose error it
// returns. Idempotent, and safe for concurrent use.
func (s *served) stop() error {
	s.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = s.srv.Shutdown(ctx)
		s.served = <-s.done
	})
	return s.served
}

// idsRE matches the ids a Manager mints, which differ between two Managers.
var idsRE = regexp.MustCompile(`(cntr|cfile)_[0-9a-f]+`)

// namer names the ids of one run of a scenario in the order they appear, so that two runs
// (on two Managers) compare equal when they did the same.
type namer map[string]string

func (n namer) name(s string) string {
	return idsRE.ReplaceAllStringFunc(s, func(id string) string {
		if v, ok := n[id]; ok {
			return v
		}
		v := fmt.Sprintf("%s#%d", id[:strings.IndexByte(id, '_')], len(n))
		n[id] = v
		return v
	})
}

// errOut is what a test compares of an error: every sentinel it matches, its SpecError, its
// text (ids named).
type errOut struct {
	Matches []string
	Spec    *sandbox.SpecError
	Text    string
}

// sentinels are the errors errOf asks an error about.
var sentinels = []struct {
	name string
	err  error
}{
	{"unavailable", sandbox.ErrUnavailable}, {"at_capacity", sandbox.ErrAtCapacity},
	{"lost", sandbox.ErrLost}, {"timeout", sandbox.ErrTimeout},
	{"unknown_container", sandbox.ErrUnknownContainer}, {"expired_container", sandbox.ErrExpiredContainer},
	{"file_not_found", sandbox.ErrFileNotFound}, {"file_too_large", sandbox.ErrFileTooLarge},
	{"invalid_path", sandbox.ErrInvalidPath}, {"no_file_access", sandbox.ErrNoFileAccess},
	{"closed", sandbox.ErrClosed}, {"invalid_spec", sandbox.ErrInvalidSpec},
	{"canceled", context.Canceled}, {"deadline", context.DeadlineExceeded},
	{"elsewhere", sandbox.ErrElsewhere}, {"source", errSource},
}

// errSource is the failure of a test's upload source.
var errSource = errors.New("the source broke")

func (n namer) errOf(err error) *errOut {
	if err == nil {
		return nil
	}
	o := &errOut{Text: n.name(err.Error())}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			o.Matches = append(o.Matches, s.name)
		}
	}
	if se, ok := errors.AsType[*sandbox.SpecError](err); ok {
		o.Spec = se
	}
	return o
}

// resultOut is a Result with its file ids named.
func (n namer) result(r sandbox.Result) sandbox.Result {
	for i := range r.Files {
		r.Files[i].ID = n.name(r.Files[i].ID)
	}
	return r
}

// infoOut is what a test compares of a ContainerInfo: ids named, times as whether set.
type infoOut struct {
	ID, Name, MemoryLimit, Status string
	Created, Active               bool
	ExpiresAfter                  time.Duration
}

func (n namer) info(ci sandbox.ContainerInfo) infoOut {
	return infoOut{
		ID: n.name(ci.ID), Name: ci.Name, MemoryLimit: ci.MemoryLimit, Status: ci.Status,
		Created: !ci.CreatedAt.IsZero(), Active: !ci.LastActiveAt.IsZero(), ExpiresAfter: ci.ExpiresAfter,
	}
}

// fileOut is what a test compares of a FileInfo: ids named, the time as whether set.
type fileOut struct {
	ID, ContainerID, Path, Source string
	Bytes                         int64
	Created                       bool
}

func (n namer) file(fi sandbox.FileInfo) fileOut {
	return fileOut{
		ID: n.name(fi.ID), ContainerID: n.name(fi.ContainerID), Path: fi.Path, Source: fi.Source,
		Bytes: fi.Bytes, Created: !fi.CreatedAt.IsZero(),
	}
}

// readOut is what a test compares of a download: its length, digest, and how it ended.
type readOut struct {
	Bytes  int
	SHA256 string
	Err    *errOut
}

func (n namer) read(rc io.ReadCloser) readOut {
	var buf bytes.Buffer
	_, err := io.Copy(&buf, rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	sum := sha256.Sum256(buf.Bytes())
	return readOut{Bytes: buf.Len(), SHA256: hex.EncodeToString(sum[:8]), Err: n.errOf(err)}
}

// failingReader yields data, then fails with err.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// sortedKeys returns m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (o *errOut) String() string {
	if o == nil {
		return "<nil>"
	}
	return fmt.Sprintf("err%v%v(%q)", o.Matches, o.Spec, o.Text)
}
