package containers

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// ErrUnauthorized is a credential the upstream refuses.
var ErrUnauthorized = errors.New("credential refused by the upstream")

// Verifier checks callers' credentials against the upstream, as the upstream would check them
// on a model call, so that a credential the upstream refuses gets no container: it sends the
// configured check (by default GET {Base}/v1/models) with the caller's credential headers alone
// (following no redirect), and remembers the verdict per identity for a while. The check must
// be one the upstream answers only for a key it takes: where GET /v1/models is public (llama.cpp's
// llama-server serves it without its --api-key) every made-up key would pass, so Path, Method
// and AcceptStatuses name another (docs/security.md lists one per upstream). Its zero value
// (with a Base) works; it is safe for concurrent use.
type Verifier struct {
	// Base is the upstream's base URL, e.g. "http://127.0.0.1:10000".
	Base string
	// Path is the path (and query) of the check under Base; "" means "/v1/models".
	Path string
	// Method is the check's method; "" means GET.
	Method string
	// Body is the check's body, sent as application/json when not empty (a POST check whose
	// body the upstream refuses only after it took the key, e.g. "{}" with AcceptStatuses 400).
	Body string
	// Headers are fixed headers the check also sends (e.g. anthropic-version); a credential
	// header among them is overridden by the caller's.
	Headers map[string]string
	// AcceptStatuses are the statuses that mean the upstream took the key; empty means any
	// 2xx. 401 and 403 always mean it refused the key; any other status is a check that could
	// not tell (a 502 to the caller, not remembered).
	AcceptStatuses []int
	// Client sends the calls. If nil, a client that follows no redirect.
	Client files.Doer
	// Accepted and Refused are how long a verdict is remembered; zero means 5 minutes and 30
	// seconds.
	Accepted, Refused time.Duration
	// MaxEntries bounds the verdicts remembered (the least recently used go first); zero means
	// 10,000.
	MaxEntries int
	// Timeout bounds one check; zero means 10 seconds.
	Timeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu    sync.Mutex
	lru   *list.List // of *verdict, most recently used first
	byKey map[string]*list.Element
	// asking holds the checks in progress by identity: concurrent calls of a new identity
	// wait for the one check.
	asking map[string]*check
}

// check is one GET /v1/models in progress; ok and err are set before done is closed.
type check struct {
	done chan struct{}
	ok   bool
	err  error
}

type verdict struct {
	identity string
	ok       bool
	until    time.Time
}

// Verify returns nil for a credential the upstream takes, an error wrapping ErrUnauthorized
// for one it refuses (a 401 or 403), and another error when it could not tell (it could not be
// reached, or answered otherwise); only the first two are remembered. identity keys the
// verdict: it is the caller's identity, derived from credentials.
func (v *Verifier) Verify(ctx context.Context, identity string, credentials files.Credentials) error {
	now := v.now()
	if ok, known := v.lookup(identity, now); known {
		if !ok {
			return ErrUnauthorized
		}
		return nil
	}
	ok, err := v.askOnce(ctx, identity, credentials, now)
	if err != nil {
		return err
	}
	if !ok {
		return ErrUnauthorized
	}
	return nil
}

// askOnce asks the upstream about identity, or waits for the check of it already in progress;
// when that check failed (its caller gave up, say), it asks itself.
func (v *Verifier) askOnce(ctx context.Context, identity string, credentials files.Credentials, now time.Time) (bool, error) {
	v.mu.Lock()
	if c, found := v.asking[identity]; found {
		v.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		if c.err == nil {
			return c.ok, nil
		}
		ok, err := v.ask(ctx, credentials)
		if err == nil {
			v.remember(identity, ok, now)
		}
		return ok, err
	}
	if v.asking == nil {
		v.asking = map[string]*check{}
	}
	c := &check{done: make(chan struct{})}
	v.asking[identity] = c
	v.mu.Unlock()

	c.ok, c.err = v.ask(ctx, credentials)
	if c.err == nil {
		v.remember(identity, c.ok, now)
	}
	v.mu.Lock()
	delete(v.asking, identity)
	v.mu.Unlock()
	close(c.done)
	return c.ok, c.err
}

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

func (v *Verifier) lookup(identity string, now time.Time) (ok, known bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	el, found := v.byKey[identity]
	if !found {
		return false, false
	}
	vd := el.Value.(*verdict)
	if !now.Before(vd.until) {
		v.lru.Remove(el)
		delete(v.byKey, identity)
		return false, false
	}
	v.lru.MoveToFront(el)
	return vd.ok, true
}

func (v *Verifier) remember(identity string, ok bool, now time.Time) {
	ttl := cmp.Or(v.Accepted, 5*time.Minute)
	if !ok {
		ttl = cmp.Or(v.Refused, 30*time.Second)
	}
	maxEntries := v.MaxEntries
	if maxEntries <= 0 {
		maxEntries = 10_000
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.lru == nil {
		v.lru, v.byKey = list.New(), map[string]*list.Element{}
	}
	if el, found := v.byKey[identity]; found {
		v.lru.Remove(el)
	}
	v.byKey[identity] = v.lru.PushFront(&verdict{identity: identity, ok: ok, until: now.Add(ttl)})
	for v.lru.Len() > maxEntries {
		last := v.lru.Back()
		v.lru.Remove(last)
		delete(v.byKey, last.Value.(*verdict).identity)
	}
}

// ask sends the check with credentials and reports whether the upstream took them.
func (v *Verifier) ask(ctx context.Context, credentials files.Credentials) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(v.Timeout, 10*time.Second))
	defer cancel()
	var body io.Reader
	if v.Body != "" {
		body = strings.NewReader(v.Body)
	}
	req, err := http.NewRequestWithContext(ctx, cmp.Or(v.Method, http.MethodGet), strings.TrimSuffix(v.Base, "/")+checkPath(v.Path), body)
	if err != nil {
		return false, fmt.Errorf("verify credentials: %w", err)
	}
	for k, val := range v.Headers {
		req.Header.Set(k, val)
	}
	for k, val := range credentials {
		req.Header.Set(k, val)
	}
	req.Header.Set("Accept", "application/json")
	if v.Body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	client := v.Client
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	resp, err := client.Do(req)
	if err != nil {
		// The error names the URL (the upstream's address), never a header.
		return false, fmt.Errorf("verify credentials: %w", err)
	}
	// Drain a little so the connection can be reused; the body is never shown.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden:
		return false, nil
	case len(v.AcceptStatuses) == 0 && resp.StatusCode >= 200 && resp.StatusCode < 300,
		slices.Contains(v.AcceptStatuses, resp.StatusCode):
		return true, nil
	default:
		return false, fmt.Errorf("verify credentials: status %d", resp.StatusCode)
	}
}

// checkPath returns the check's path: p with a leading slash, "/v1/models" when empty.
func checkPath(p string) string {
	switch {
	case p == "":
		return "/v1/models"
	case !strings.HasPrefix(p, "/"):
		return "/" + p
	}
	return p
}

// acceptedKey is where [ModelCalls] keeps an identity's record among its pending entries.
var acceptedKey = store.Key{Kind: "model_call_accepted", ID: "upstream"}

// ModelCalls is the record of the identities the upstream has accepted on a real model call,
// for upstreams where no key check tells a key they take from a made-up one (llama.cpp's
// llama-server serves GET /v1/models without its --api-key): the processor calls Accepted when
// the upstream answers a model call it forwarded with a 2xx, and the Containers API and the
// Files routes accept, through Verify, only an identity so recorded within TTL. The record is
// one entry of the identity's in Store, so every replica sharing the store shares it, bounded
// and expired as the store bounds its entries (an entry the store dropped early is written
// again at a model call of the identity after the refresh, TTL/10). Its zero value (with a Store) works; it is safe
// for concurrent use.
type ModelCalls struct {
	// Store keeps the record. Required.
	Store store.Pending
	// TTL is how long an identity stays accepted after its last accepted model call; zero
	// means 30 minutes. Stores keep an entry at most an hour (memory.PendingTTL).
	TTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu sync.Mutex
	// written holds, per identity, until when the record this process last wrote holds, so
	// that a model call writes to the store at most once per refresh (TTL/10) per identity; it
	// is bounded by maxWritten (cleared when full: the cost is a rewrite).
	written map[string]time.Time
}

// maxWritten bounds ModelCalls.written.
const maxWritten = 10_000

func (m *ModelCalls) ttl() time.Duration { return cmp.Or(m.TTL, 30*time.Minute) }

func (m *ModelCalls) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Accepted records that the upstream answered a model call of identity with a 2xx. Nothing is
// recorded for the anonymous identity "". It writes to the store at most once per TTL/10 per
// identity; the write does not block on the caller's context (the store bounds it).
func (m *ModelCalls) Accepted(identity string) {
	if identity == "" {
		return
	}
	now := m.now()
	until := now.Add(m.ttl())
	m.mu.Lock()
	if last, ok := m.written[identity]; ok && last.Sub(now) > m.ttl()-m.ttl()/10 {
		m.mu.Unlock()
		return
	}
	if m.written == nil || len(m.written) >= maxWritten {
		m.written = map[string]time.Time{}
	}
	m.written[identity] = until
	m.mu.Unlock()
	m.Store.Put(identity, []store.PendingCall{{CallID: "accepted", Output: strconv.FormatInt(until.UnixMilli(), 10)}}, acceptedKey)
}

// Verify returns nil when identity's record holds (a model call of it was accepted within
// TTL), else an error wrapping ErrUnauthorized: the Containers API's 401. It has the shape of
// [Verifier.Verify] and [Config.Verify]; credentials are not used.
func (m *ModelCalls) Verify(_ context.Context, identity string, _ files.Credentials) error {
	if identity != "" {
		if calls := m.Store.Get(identity, acceptedKey); len(calls) == 1 {
			ms, err := strconv.ParseInt(calls[0].Output, 10, 64)
			if err == nil && m.now().Before(time.UnixMilli(ms)) {
				return nil
			}
		}
	}
	return fmt.Errorf("no model call of this identity accepted by the upstream: %w", ErrUnauthorized)
}
