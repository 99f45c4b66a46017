package redis

import (
	"context"
	"crypto/sha256"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// DefaultPrefix starts every key a Store keeps when Options.Prefix is empty.
const DefaultPrefix = "codeinterp:"

// DefaultTombstoneTTL is how long an expired registration is kept when Options.TombstoneTTL is
// zero: sandbox.TombstoneTTL, which this package does not import (a store does not depend on
// its callers; a test checks that the two agree).
const DefaultTombstoneTTL = 24 * time.Hour

// DefaultTimeout bounds each call to Redis when Options.Timeout is zero.
const DefaultTimeout = 2 * time.Second

// Options are a Store's settings; the zero value of each field selects the default it names.
type Options struct {
	// Prefix starts every key; DefaultPrefix when empty. It must not contain '{' or '}' (see the
	// package comment on hash tags).
	Prefix string
	// Log receives the errors of the calls that cannot return one; none when nil.
	Log *zap.Logger
	// Timeout bounds each call to Redis; DefaultTimeout when zero. It holds only with a client
	// that honours deadlines (see NewClient).
	Timeout time.Duration
	// Now is the clock the entries' deadlines are read from; time.Now when nil.
	Now func() time.Time

	// The lifetimes of what is stored; those of package memory (and DefaultTombstoneTTL) when
	// zero.
	PendingTTL, AliasTTL, ContainersTTL, TombstoneTTL time.Duration
	// The bounds of the pending calls, in all and per identity, and of the aliases and the
	// context containers in all; those of package memory when zero.
	PendingMaxEntries, PendingMaxBytes                       int
	PendingMaxEntriesPerIdentity, PendingMaxBytesPerIdentity int
	AliasMaxEntries, ContainersMaxEntries                    int
}

// Store keeps the Registry, the Continuations and the Nodes in one Redis. Safe for concurrent
// use. It does not own the client: the caller closes it after the last call.
type Store struct {
	c   goredis.UniversalClient
	o   Options
	log *zap.Logger

	// The key prefixes of each store, hash tag included.
	registry, pending, alias, containers, nodes string

	logMu      sync.Mutex // guards the fields below
	lastLog    time.Time
	suppressed int
}

var (
	_ store.Registry      = (*Store)(nil)
	_ store.Continuations = (*Store)(nil)
	_ store.Nodes         = (*Store)(nil)
)

// New returns a Store that keeps its state through c (a client, a Sentinel failover client or a
// Cluster client).
func New(c goredis.UniversalClient, o Options) *Store {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	def(&o.Timeout, DefaultTimeout)
	def(&o.PendingTTL, memory.PendingTTL)
	def(&o.AliasTTL, memory.AliasTTL)
	def(&o.ContainersTTL, memory.ContainersTTL)
	def(&o.TombstoneTTL, DefaultTombstoneTTL)
	defInt(&o.PendingMaxEntries, memory.PendingMaxEntries)
	defInt(&o.PendingMaxBytes, memory.PendingMaxBytes)
	defInt(&o.PendingMaxEntriesPerIdentity, memory.PendingMaxEntriesPerIdentity)
	defInt(&o.PendingMaxBytesPerIdentity, memory.PendingMaxBytesPerIdentity)
	defInt(&o.AliasMaxEntries, memory.AliasMaxEntries)
	defInt(&o.ContainersMaxEntries, memory.ContainersMaxEntries)
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	if !honoursDeadlines(c) {
		log.Warn("redis client ignores call deadlines: a hung Redis holds a call for the client's read timeout, not the store's (make the client with NewClient)",
			zap.Duration("timeout", o.Timeout))
	}
	p := o.Prefix
	return &Store{
		c: c, o: o, log: log,
		registry: p + "{registry}:", pending: p + "{pending}:", alias: p + "{alias}:",
		containers: p + "{containers}:", nodes: p + "{nodes}:",
	}
}

// NewClient returns the go-redis client o describes (a client, a Sentinel failover client or a
// Cluster client, as goredis.NewUniversalClient chooses) with what a Store needs of it: it
// honours the deadline of each call (ContextTimeoutEnabled; without it a hung Redis holds a
// call for the client's ReadTimeout, 3 s, not the Store's Timeout) and dials once per attempt
// (DialerRetries 1 unless set), so that a Redis that is down fails a call at once. The caller
// closes it.
func NewClient(o goredis.UniversalOptions) goredis.UniversalClient {
	o.ContextTimeoutEnabled = true
	if o.DialerRetries == 0 {
		o.DialerRetries = 1
	}
	return goredis.NewUniversalClient(&o)
}

// honoursDeadlines reports whether c bounds its network calls by their contexts' deadlines (as
// far as it can be told: a client of another type is taken to).
func honoursDeadlines(c goredis.UniversalClient) bool {
	switch c := c.(type) {
	case *goredis.Client:
		return c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// call returns a context for one call to Redis, bounded by the Store's timeout.
func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.o.Timeout)
}

// background returns a context for one call of a method that takes none.
func (s *Store) background() (context.Context, context.CancelFunc) {
	return s.call(context.Background())
}

// logError logs err of op, at most once a second; the lines left out are counted in the next.
func (s *Store) logError(op string, err error) {
	s.logMu.Lock()
	now := time.Now()
	if now.Sub(s.lastLog) < time.Second {
		s.suppressed++
		s.logMu.Unlock()
		return
	}
	n := s.suppressed
	s.lastLog, s.suppressed = now, 0
	s.logMu.Unlock()
	s.log.Warn("redis store call failed; treated as nothing stored", zap.String("op", op), zap.Error(err), zap.Int("suppressed", n))
}

// nowMS returns the Store's clock in Unix milliseconds.
func (s *Store) nowMS() int64 { return s.o.Now().UnixMilli() }

// boundedID returns the part id is kept as in a key: id itself up to memory.MaxKeyBytes, else
// a NUL and the SHA-256 of id (as package memory keys it).
func boundedID(id string) string {
	if len(id) <= memory.MaxKeyBytes {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "\x00" + string(sum[:])
}

// part returns s, bounded, with its length before it: a part of a key that more parts follow.
func part(s string) string {
	b := boundedID(s)
	return strconv.Itoa(len(b)) + ":" + b
}

// entryID names what key holds for identity within one store: "len:identity" "len:kind" id.
func entryID(identity string, k store.Key) string {
	return part(identity) + part(k.Kind) + boundedID(k.ID)
}

// splitDeadline splits a stored value "deadline-ms:rest" and reports whether it is live at now.
func splitDeadline(v string, now int64) (string, bool) {
	for i := 0; i < len(v); i++ {
		if v[i] == ':' {
			if d, err := strconv.ParseInt(v[:i], 10, 64); err == nil && now <= d {
				return v[i+1:], true
			}
			return "", false
		}
	}
	return "", false
}
