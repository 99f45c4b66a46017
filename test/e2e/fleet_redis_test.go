package e2e

import (
	"bufio"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// What one conversation (one request, two code rounds, a fresh container, through a gateway and
// a sandbox node) may cost Redis: round trips, and commands as Redis counts them (a script's own
// included). A change that adds round trips on the loop's path shows here first.
const (
	maxRedisTripsPerConversation    = 16
	maxRedisCommandsPerConversation = 150
)

// testRedisCommands records, with Redis's MONITOR, every command one conversation makes Redis
// run (a fresh key, so a fresh container; testFleet runs it after its scenarios, so scripts are
// loaded and the node directory read), and logs them by caller (the script or command and the
// kind of key it touches): the breakdown docs/performance.md quotes.
func testRedisCommands(t *testing.T, f *Fleet, s *Stack) {
	f.Model.Handle("/v1/responses", loadModel)
	// The pruner reads the registrations of the live containers every few seconds: a round of
	// it that falls in a conversation's window is not the conversation's. The conversation
	// with the fewest round trips of three is the one without.
	var byCaller map[string]int
	total, trips := 0, -1
	for i := range 3 {
		mon := monitorRedis(t, f.Redis.Addr())
		time.Sleep(100 * time.Millisecond) // MONITOR is on before the conversation starts
		if err := loadConversation(s, fmt.Sprintf("sk-redis-count-%d", i), 1+i); err != nil {
			t.Fatalf("conversation: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // its last commands reach the monitor
		by, n, rt := map[string]int{}, 0, 0
		for _, l := range mon.stop() {
			if c := redisCaller(l); c != "" {
				by[c]++
				n++
				if !strings.HasPrefix(c, " ") {
					rt++
				}
			}
		}
		if trips < 0 || rt < trips {
			byCaller, total, trips = by, n, rt
		}
	}
	keys := make([]string, 0, len(byCaller))
	for k := range byCaller {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return byCaller[b] - byCaller[a] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %4d  %s", byCaller[k], k)
	}
	t.Logf("one conversation: %d round trips to Redis, %d commands run (a script's own included; heartbeats too), by caller:%s", trips, total, b.String())
	if total == 0 {
		t.Fatal("MONITOR recorded nothing: the fleet does not use this Redis")
	}
	assert.LessOrEqual(t, trips, maxRedisTripsPerConversation, "round trips to Redis of one conversation")
	assert.LessOrEqual(t, total, maxRedisCommandsPerConversation, "commands Redis ran for one conversation")
}

var (
	monitorLine = regexp.MustCompile(`^\d+\.\d+ \[\d+ ([^\]]+)\] (.*)$`)
	monitorArg  = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
	// keyIDs are the parts of a key that name one record (ids, hashes, identities).
	keyIDs = regexp.MustCompile(`[0-9a-f]{16,}|(cntr|resp|ci|call|cfile|fc)_[0-9A-Za-z]+`)
)

// redisCaller names what a MONITOR line is: "script <first key>" for a script's call, "  <cmd>
// <key>" for a command a script ran (indented), "<cmd> <key>" for a plain command; keys with
// their ids replaced by "*". It returns "" for a line that is not a command.
func redisCaller(line string) string {
	m := monitorLine.FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	args := monitorArg.FindAllStringSubmatch(m[2], -1)
	if len(args) == 0 {
		return ""
	}
	cmd := strings.ToLower(args[0][1])
	key := ""
	switch {
	case cmd == "evalsha" || cmd == "eval":
		if len(args) > 3 {
			key = args[3][1]
		}
		cmd = "script"
	case len(args) > 1:
		key = args[1][1]
	}
	key = keyIDs.ReplaceAllString(key, "*")
	if m[1] == "lua" {
		return "  " + cmd + " " + key
	}
	return cmd + " " + key
}

// redisMonitor is a connection in MONITOR mode collecting every line Redis sends it.
type redisMonitor struct {
	conn  net.Conn
	done  chan struct{}
	mu    sync.Mutex
	lines []string
}

// monitorRedis opens a MONITOR connection to addr; stop (or the test's end) closes it.
func monitorRedis(t *testing.T, addr string) *redisMonitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	m := &redisMonitor{conn: conn, done: make(chan struct{})}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatalf("monitor: %v", err)
	}
	go func() {
		defer close(m.done)
		sc := bufio.NewScanner(conn)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			m.mu.Lock()
			m.lines = append(m.lines, strings.TrimPrefix(sc.Text(), "+"))
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { m.stop() })
	return m
}

// stop closes the connection, waits for its reader and returns the lines seen.
func (m *redisMonitor) stop() []string {
	_ = m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lines
}
