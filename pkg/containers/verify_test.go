package containers

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
	storeredis "github.com/codeinterp/codeinterp/pkg/store/redis"
	"github.com/codeinterp/codeinterp/pkg/store/redis/redistest"
)

// modelsServer is an upstream whose GET /v1/models takes the keys given, counting its calls.
func modelsServer(t *testing.T, calls *atomic.Int32, keys ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/v1/models" || r.Header.Get("Content-Type") != "" {
			http.Error(w, "unexpected", http.StatusTeapot)
			return
		}
		for _, k := range keys {
			if r.Header.Get("Authorization") == "Bearer "+k {
				_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
				return
			}
		}
		http.Error(w, `{"error":{"code":"invalid_api_key"}}`, http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestVerifiedCredentials: a key the upstream refuses is a 401 invalid_api_key and creates
// nothing; a key it takes works; verdicts are remembered, so the upstream is asked once per
// key and TTL.
func TestVerifiedCredentials(t *testing.T) {
	var calls atomic.Int32
	up := modelsServer(t, &calls, "sk-good")
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	v := &Verifier{Base: up.URL, Client: up.Client(), Now: clk.Now}
	f := newFixture(t, Config{Verify: v.Verify})

	for range 3 {
		status, body := post(t, f, "sk-bad", "/v1/containers", "application/json", `{"name":"x"}`)
		assert.Equal(t, http.StatusUnauthorized, status, "a refused key: %s", body)
		assert.Equal(t, "invalid_api_key", gjson.Get(body, "error.code").String(), "code: %s", body)
	}
	assert.Zero(t, f.store.count("Bearer sk-bad"), "a refused key creates nothing")
	assert.Equal(t, int32(1), calls.Load(), "the refusal is remembered")

	for range 3 {
		status, body := post(t, f, "sk-good", "/v1/containers", "application/json", `{"name":"x"}`)
		assert.Equal(t, http.StatusOK, status, "a key the upstream takes: %s", body)
	}
	assert.Equal(t, 3, f.store.count("Bearer sk-good"), "its containers")
	assert.Equal(t, int32(2), calls.Load(), "the acceptance is remembered")

	clk.add(31 * time.Second)
	status, _ := post(t, f, "sk-bad", "/v1/containers", "application/json", `{"name":"x"}`)
	assert.Equal(t, http.StatusUnauthorized, status, "refused again")
	status, _ = post(t, f, "sk-good", "/v1/containers", "application/json", `{"name":"x"}`)
	assert.Equal(t, http.StatusOK, status, "still taken")
	assert.Equal(t, int32(3), calls.Load(), "a refusal is asked again after 30s, an acceptance not")
	clk.add(5 * time.Minute)
	status, _ = post(t, f, "sk-good", "/v1/containers", "application/json", `{"name":"x"}`)
	assert.Equal(t, http.StatusOK, status, "taken")
	assert.Equal(t, int32(4), calls.Load(), "an acceptance is asked again after 5 minutes")
}

// TestVerifierBounded: the verdicts remembered are bounded, the least recently used first out.
func TestVerifierBounded(t *testing.T) {
	var calls atomic.Int32
	up := modelsServer(t, &calls, "a", "b", "c")
	v := &Verifier{Base: up.URL, Client: up.Client(), MaxEntries: 2}
	ctx := t.Context()
	for _, k := range []string{"a", "b", "a", "c", "a"} {
		require.NoError(t, v.Verify(ctx, k, map[string]string{"Authorization": "Bearer " + k}), "verify %s", k)
	}
	assert.Equal(t, int32(3), calls.Load(), "a stays remembered, being used")
	require.NoError(t, v.Verify(ctx, "b", map[string]string{"Authorization": "Bearer b"}), "verify b")
	assert.Equal(t, int32(4), calls.Load(), "b was dropped for c")
	v.mu.Lock()
	defer v.mu.Unlock()
	assert.Len(t, v.byKey, 2, "at most MaxEntries")
}

// TestVerifierUpstreamDown: an upstream that cannot be asked is a 502, never a pass, and is
// asked again next time.
func TestVerifierUpstreamDown(t *testing.T) {
	var calls atomic.Int32
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	f := newFixture(t, Config{Verify: (&Verifier{Base: down.URL, Client: down.Client()}).Verify})
	for range 2 {
		status, body := post(t, f, "sk-a", "/v1/containers", "application/json", `{"name":"x"}`)
		assert.Equal(t, http.StatusBadGateway, status, "the upstream fails: %s", body)
		assert.NotContains(t, body, "127.0.0.1", "no address")
	}
	assert.Equal(t, int32(2), calls.Load(), "a failure is not remembered")
	assert.Zero(t, f.store.count("Bearer sk-a"), "nothing is created")

	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	g := newFixture(t, Config{Verify: (&Verifier{Base: gone.URL}).Verify})
	status, body := post(t, g, "sk-a", "/v1/containers", "application/json", `{"name":"x"}`)
	assert.Equal(t, http.StatusBadGateway, status, "the upstream cannot be reached: %s", body)
	assert.Zero(t, g.store.count("Bearer sk-a"), "nothing is created")
}

// TestVerifierAsksOnce: concurrent calls of a new identity wait for one check.
func TestVerifierAsksOnce(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		<-release
		_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
	}))
	t.Cleanup(up.Close)
	v := &Verifier{Base: up.URL, Client: up.Client()}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- v.Verify(t.Context(), "id-a", map[string]string{"Authorization": "Bearer a"}) })
	}
	require.Eventually(t, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.asking["id-a"] != nil
	}, 5*time.Second, time.Millisecond, "a check is under way")
	time.Sleep(50 * time.Millisecond) // the others find it
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err, "verify")
	}
	assert.Equal(t, int32(1), calls.Load(), "one check for all")
}

// countingPending is a memory.Pending that counts its Puts.
type countingPending struct {
	*memory.Pending
	puts atomic.Int32
}

func (c *countingPending) Put(identity string, calls []store.PendingCall, keys ...store.Key) {
	c.puts.Add(1)
	c.Pending.Put(identity, calls, keys...)
}

// TestModelCallsAccepted: with api_key_check.mode "model_call", an identity gets the Containers
// API's 401 until a model call of it was accepted, then works for TTL since the last one; a
// model call writes the record at most once per TTL/10; another replica sharing the store
// (another ModelCalls over it) accepts the identity too.
func TestModelCallsAccepted(t *testing.T) {
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	st := &countingPending{Pending: memory.NewPending(nil)}
	m := &ModelCalls{Store: st, TTL: 10 * time.Minute, Now: clk.Now}
	f := newFixture(t, Config{Verify: m.Verify})

	status, body := post(t, f, "sk-made-up", "/v1/containers", "application/json", `{"name":"x"}`)
	assert.Equal(t, http.StatusUnauthorized, status, "no model call yet: %s", body)
	assert.Equal(t, "invalid_api_key", gjson.Get(body, "error.code").String(), "the 401's shape: %s", body)
	assert.Zero(t, f.store.count("Bearer sk-made-up"), "a refused identity creates nothing")

	m.Accepted("Bearer sk-good")
	for range 5 {
		clk.add(10 * time.Second)
		m.Accepted("Bearer sk-good")
	}
	assert.Equal(t, int32(1), st.puts.Load(), "one write within TTL/10")
	status, body = post(t, f, "sk-good", "/v1/containers", "application/json", `{"name":"x"}`)
	assert.Equal(t, http.StatusOK, status, "accepted on a model call: %s", body)
	status, _ = post(t, f, "sk-made-up", "/v1/containers", "application/json", `{"name":"x"}`)
	assert.Equal(t, http.StatusUnauthorized, status, "another identity is still refused")

	replica := &ModelCalls{Store: st, TTL: 10 * time.Minute, Now: clk.Now}
	assert.NoError(t, replica.Verify(t.Context(), "Bearer sk-good", nil), "another replica over the same store")

	clk.add(time.Minute)
	m.Accepted("Bearer sk-good")
	assert.Equal(t, int32(2), st.puts.Load(), "rewritten after TTL/10")
	clk.add(9*time.Minute + 59*time.Second)
	assert.NoError(t, m.Verify(t.Context(), "Bearer sk-good", nil), "within TTL of the last acceptance")
	clk.add(2 * time.Second)
	assert.ErrorIs(t, m.Verify(t.Context(), "Bearer sk-good", nil), ErrUnauthorized, "TTL after the last acceptance")

	m.Accepted("")
	assert.ErrorIs(t, m.Verify(t.Context(), "", nil), ErrUnauthorized, "the anonymous identity is never accepted")
}

// TestModelCallsFleet: replicas sharing Redis share the record: an identity whose model call
// one gateway saw accepted is taken by another's Containers API.
func TestModelCallsFleet(t *testing.T) {
	srv := redistest.Start(t)
	replica := func() *ModelCalls {
		return &ModelCalls{Store: storeredis.New(srv.Client(), storeredis.Options{Prefix: "accepted:", Log: zaptest.NewLogger(t)})}
	}
	a, b := replica(), replica()
	assert.ErrorIs(t, b.Verify(t.Context(), "id-1", nil), ErrUnauthorized, "before any model call")
	a.Accepted("id-1")
	assert.NoError(t, b.Verify(t.Context(), "id-1", nil), "accepted through another replica")
	assert.ErrorIs(t, b.Verify(t.Context(), "id-2", nil), ErrUnauthorized, "another identity")
}
