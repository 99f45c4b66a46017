package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// The figures of the real-Envoy issue (run by `make bench`): client → real Envoy 1.40 → fake
// model on loopback, the same routes with the ext_proc filter (codeinterp behind it) and with
// the filter disabled on every route, one client, one run, the two requests of a pair sent
// alternately so that drift in the machine's load affects both alike. Each reports the p50 and
// p99 of both and the difference of the medians (diff-p50-ns); the pass-through also runs the
// filter against a do-nothing ext_proc server (nop-*), which is what the ext_proc exchange
// itself costs in Envoy whatever the server does:
//
//   - BenchmarkEnvoyPassThrough: a 10 KB Chat Completions request without the tool;
//   - BenchmarkEnvoyNoCode: a 1 MB Responses request with code_interpreter whose answer calls
//     no code;
//   - BenchmarkEnvoyLoopRound: one loop round (the model runs print(1) once, then answers): the
//     total, the time the fake model spent on its two calls, and codeinterp's share (the total
//     minus the model's time; Envoy's own proxying of the two calls is in that share too).

// envoyBench is a real Envoy with the filter, a second one with the filter disabled on every
// route, the codeinterp server behind the first, and the fake model behind both.
type envoyBench struct {
	with, without, nop          *http.Client
	withURL, withoutURL, nopURL string
	// modelNanos adds up the time the fake model's handlers spent, from the request's arrival
	// to the end of the answer.
	modelNanos atomic.Int64
	// sent holds when the fake model sent each text delta of its last streamed answer.
	sent [benchChunks]atomic.Int64
}

// benchChunks is how many text deltas a streamed answer of the benchmarks has.
const benchChunks = 16

// streamChunks answers as a Responses event stream whose message text comes in benchChunks
// deltas "dNN|", 2 ms apart, each flushed and its send time noted.
func (eb *envoyBench) streamChunks(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	text := ""
	for i := range benchChunks {
		text += fmt.Sprintf("d%02d|", i)
	}
	item := fakemodel.Message(text)
	for _, ev := range fakemodel.ResponsesStream(testModel, usage(30, 5), item) {
		if ev.Name != "response.output_text.delta" {
			writeEvent(w, fl, ev.Name, ev.Data)
			continue
		}
		for i := range benchChunks {
			if i > 0 {
				time.Sleep(2 * time.Millisecond)
			}
			eb.sent[i].Store(time.Now().UnixNano())
			writeEvent(w, fl, ev.Name, strings.Replace(ev.Data, `"delta":"`+text+`"`, fmt.Sprintf(`"delta":"d%02d|"`, i), 1))
		}
	}
}

// writeEvent writes one server-sent event and flushes it.
func writeEvent(w http.ResponseWriter, fl http.Flusher, name, data string) {
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
	if fl != nil {
		fl.Flush()
	}
}

func newEnvoyBench(b *testing.B) *envoyBench {
	b.Helper()
	harness.RequireEnvoy(b)
	env := NewEnv(b, EnvOptions{Configure: func(c *configv1.Config) {
		c.Sandbox.WarmPoolSize = proto.Uint32(1)
	}})
	eb := &envoyBench{}
	env.Model.Handle("/v1/chat/completions", eb.timed(func(w http.ResponseWriter, _ []byte) {
		writeJSON(w, fakemodel.Chat(testModel, usage(2500, 12), "pass-through answer"))
	}))
	env.Model.Handle("/v1/responses", eb.timed(func(w http.ResponseWriter, body []byte) {
		bench := gjson.GetBytes(body, "metadata.bench").String()
		streams := gjson.GetBytes(body, "stream").Bool()
		switch {
		case streams && (bench == "chunks-plain" || bench == "chunks-first" ||
			bench == "chunks" && bytes.Contains(body, []byte(`"function_call_output"`))):
			eb.streamChunks(w)
		case bench == "chunks":
			writeJSON(w, fakemodel.Responses(testModel, usage(20, 5), runCode("call_1", "print(1)")))
		case bytes.Contains(body, []byte(`"function_call_output"`)):
			writeJSON(w, fakemodel.Responses(testModel, usage(30, 5), fakemodel.Message("1")))
		case bench == "code":
			writeJSON(w, fakemodel.Responses(testModel, usage(20, 5), runCode("call_1", "print(1)")))
		default:
			writeJSON(w, fakemodel.Responses(testModel, usage(250000, 5), fakemodel.Message("no code needed")))
		}
	}))

	with := harness.StartReal(b, env.HarnessOptions())
	env.Serve(b, with)
	off := harness.ShippedConfig(b)
	for i := range off.Routes {
		off.Routes[i].PerRoute = &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Disabled{Disabled: true}}
	}
	o := env.HarnessOptions()
	o.Config = off
	without := harness.StartReal(b, o)

	o = env.HarnessOptions()
	o.ExtProcAddr = benchNopServer(b)
	nop := harness.StartReal(b, o)

	eb.withURL, eb.withoutURL, eb.nopURL = with.URL(), without.URL(), nop.URL()
	eb.with = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	eb.without = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	eb.nop = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	b.Cleanup(func() {
		eb.with.CloseIdleConnections()
		eb.without.CloseIdleConnections()
		eb.nop.CloseIdleConnections()
	})
	return eb
}

func (eb *envoyBench) timed(h func(w http.ResponseWriter, body []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h(w, body)
		eb.modelNanos.Add(int64(time.Since(start)))
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	js, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(js)
}

// timedPost sends body to base+path with c and checks the answer is a 200 whose body holds want.
func timedPost(b *testing.B, c *http.Client, base, path string, body []byte, want string) time.Duration {
	b.Helper()
	_, total := timedStream(b, c, base, path, body, want)
	return total
}

// pairs times the same request through both Envoys (and, with nop, the do-nothing server's),
// alternating, and reports p50/p99 of each and the difference of the medians.
func (eb *envoyBench) pairs(b *testing.B, path string, body []byte, want string, nop bool) {
	// Warm the paths (connections, the server's first request) before timing.
	for range 3 {
		timedPost(b, eb.with, eb.withURL, path, body, want)
		timedPost(b, eb.without, eb.withoutURL, path, body, want)
		if nop {
			timedPost(b, eb.nop, eb.nopURL, path, body, want)
		}
	}
	b.SetBytes(int64(len(body)))
	var with, without, nops []time.Duration
	for b.Loop() {
		with = append(with, timedPost(b, eb.with, eb.withURL, path, body, want))
		without = append(without, timedPost(b, eb.without, eb.withoutURL, path, body, want))
		if nop {
			nops = append(nops, timedPost(b, eb.nop, eb.nopURL, path, body, want))
		}
	}
	if nop {
		p50n, p99n := percentiles(nops)
		p50o, _ := percentiles(without)
		b.ReportMetric(float64(p50n.Nanoseconds()), "p50-nop-ns")
		b.ReportMetric(float64(p99n.Nanoseconds()), "p99-nop-ns")
		b.ReportMetric(float64((p50n - p50o).Nanoseconds()), "nop-diff-p50-ns")
	}
	p50w, p99w := percentiles(with)
	p50o, p99o := percentiles(without)
	b.ReportMetric(float64(p50w.Nanoseconds()), "p50-with-ns")
	b.ReportMetric(float64(p99w.Nanoseconds()), "p99-with-ns")
	b.ReportMetric(float64(p50o.Nanoseconds()), "p50-without-ns")
	b.ReportMetric(float64(p99o.Nanoseconds()), "p99-without-ns")
	b.ReportMetric(float64((p50w - p50o).Nanoseconds()), "diff-p50-ns")
}

func percentiles(took []time.Duration) (p50, p99 time.Duration) {
	if len(took) == 0 {
		return 0, 0
	}
	s := slices.Clone(took)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100]
}

// chatBody is a Chat Completions request of about size bytes without the tool.
func chatBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-e2e","messages":[`)
	for i := 0; b.Len() < size-100; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":%q,"content":"turn %d: the quick brown fox jumps over the lazy dog, again and again"}`,
			[]string{"user", "assistant"}[i%2], i)
	}
	b.WriteString(`],"temperature":0.2}`)
	return b.Bytes()
}

// BenchmarkEnvoyPassThrough: a 10 KB Chat request without the tool, with and without the filter.
func BenchmarkEnvoyPassThrough(b *testing.B) {
	eb := newEnvoyBench(b)
	eb.pairs(b, "/v1/chat/completions", chatBody(10<<10), "pass-through answer", true)
}

// BenchmarkEnvoyNoCode: a 1 MB Responses request with code_interpreter whose answer calls no
// code, with and without the filter (without it, the model gets the hosted tool as sent).
func BenchmarkEnvoyNoCode(b *testing.B) {
	eb := newEnvoyBench(b)
	eb.pairs(b, "/v1/responses", conversation(1<<20), "no code needed", false)
}

// BenchmarkEnvoyLoopRound: one loop round through the real Envoy; the container is a session's,
// so each op runs print(1) in a live container, as a conversation's later turns do.
func BenchmarkEnvoyLoopRound(b *testing.B) {
	eb := newEnvoyBench(b)
	body := []byte(`{"model":"gpt-e2e","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],` +
		`"metadata":{"bench":"code","session_id":"bench-loop"},"input":"print one"}`)
	const want = `"code_interpreter_call"`
	for range 3 {
		timedPost(b, eb.with, eb.withURL, "/v1/responses", body, want)
	}
	var total, share []time.Duration
	var model time.Duration
	for b.Loop() {
		before := eb.modelNanos.Load()
		took := timedPost(b, eb.with, eb.withURL, "/v1/responses", body, want)
		m := time.Duration(eb.modelNanos.Load() - before)
		total = append(total, took)
		share = append(share, took-m)
		model += m
	}
	p50, p99 := percentiles(total)
	s50, s99 := percentiles(share)
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-total-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-total-ns")
	b.ReportMetric(float64(s50.Nanoseconds()), "p50-share-ns")
	b.ReportMetric(float64(s99.Nanoseconds()), "p99-share-ns")
	b.ReportMetric(float64(model.Nanoseconds())/float64(len(total)), "model-ns/op")
}

// timedStream sends body to base+path with c and returns when the first byte of the answer's
// body arrived and when the body ended, from the request; the answer must be a 200 holding want.
func timedStream(b *testing.B, c *http.Client, base, path string, body []byte, want string) (first, total time.Duration) {
	b.Helper()
	req, err := http.NewRequestWithContext(b.Context(), http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		b.Fatalf("request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		b.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	one := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, one); err != nil {
		b.Fatalf("POST %s: read the first byte: %v", path, err)
	}
	first = time.Since(start)
	rest, err := io.ReadAll(resp.Body)
	total = time.Since(start)
	if got := append(one, rest...); err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(got, []byte(want)) {
		b.Fatalf("POST %s: status %d, %v, want a body with %q: %.300s", path, resp.StatusCode, err, want, got)
	}
	return first, total
}

// BenchmarkEnvoyStreamFirstByte: a streaming request whose answer runs print(1) once, through
// the real Envoy with codeinterp streaming it progressively (FULL_DUPLEX_STREAMED): the time to
// the client's first byte (first-*: response.created, sent as soon as the model's first answer
// is read) and to the end of the stream (total-*), against the first byte of a 10 KB request
// without the filter that the model answers at once (first-without-*).
func BenchmarkEnvoyStreamFirstByte(b *testing.B) {
	eb := newEnvoyBench(b)
	body := []byte(`{"model":"gpt-e2e","stream":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],` +
		`"metadata":{"bench":"code","session_id":"bench-stream"},"input":"print one"}`)
	plain := chatBody(10 << 10)
	const want = `"response.completed"`
	for range 3 {
		timedStream(b, eb.with, eb.withURL, "/v1/responses", body, want)
	}
	var first, total, without []time.Duration
	for b.Loop() {
		f, t := timedStream(b, eb.with, eb.withURL, "/v1/responses", body, want)
		first, total = append(first, f), append(total, t)
		w, _ := timedStream(b, eb.without, eb.withoutURL, "/v1/chat/completions", plain, "pass-through answer")
		without = append(without, w)
	}
	for _, m := range []struct {
		name string
		took []time.Duration
	}{{"first", first}, {"total", total}, {"first-without", without}} {
		p50, p99 := percentiles(m.took)
		b.ReportMetric(float64(p50.Nanoseconds()), "p50-"+m.name+"-ns")
		b.ReportMetric(float64(p99.Nanoseconds()), "p99-"+m.name+"-ns")
	}
}

// chunkDelays reads the event stream of a request to base+path and returns, for each text
// delta "dNN|" the fake model sent, how long it took from the model's send to the client.
func (eb *envoyBench) chunkDelays(b *testing.B, c *http.Client, base, path string, body []byte) []time.Duration {
	b.Helper()
	req, err := http.NewRequestWithContext(b.Context(), http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		b.Fatalf("request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("POST %s: %v (status %v)", path, err, resp)
	}
	defer resp.Body.Close()
	var out []time.Duration
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") || !strings.Contains(line, `"type":"response.output_text.delta"`) {
			continue
		}
		at := time.Now().UnixNano()
		var i int
		if _, err := fmt.Sscanf(gjson.Get(line[len("data: "):], "delta").String(), "d%02d|", &i); err != nil || i < 0 || i >= benchChunks {
			b.Fatalf("POST %s: a delta that is not the model's: %s", path, line)
		}
		out = append(out, time.Duration(at-eb.sent[i].Load()))
	}
	if len(out) != benchChunks {
		b.Fatalf("POST %s: %d of the %d deltas arrived", path, len(out), benchChunks)
	}
	return out
}

// BenchmarkEnvoyStreamChunks: the model streams its answer in benchChunks text deltas 2 ms
// apart; how long each takes from the model to the client, through the real Envoy with
// codeinterp relaying the loop's streamed follow-up (after one print(1) round: chunk-with-*),
// and relaying the request's own first answer, which calls no code, as Envoy passes it on
// (chunk-first-*), against the same stream passed through Envoy without the filter
// (chunk-without-*).
func BenchmarkEnvoyStreamChunks(b *testing.B) {
	eb := newEnvoyBench(b)
	with := []byte(`{"model":"gpt-e2e","stream":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],` +
		`"metadata":{"bench":"chunks","session_id":"bench-chunks"},"input":"print one, then talk"}`)
	firstOnly := []byte(`{"model":"gpt-e2e","stream":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}],` +
		`"metadata":{"bench":"chunks-first"},"input":"talk"}`)
	plain := []byte(`{"model":"gpt-e2e","stream":true,"metadata":{"bench":"chunks-plain"},"input":"talk"}`)
	for range 2 {
		eb.chunkDelays(b, eb.with, eb.withURL, "/v1/responses", with)
		eb.chunkDelays(b, eb.with, eb.withURL, "/v1/responses", firstOnly)
	}
	var w, f, o []time.Duration
	for b.Loop() {
		w = append(w, eb.chunkDelays(b, eb.with, eb.withURL, "/v1/responses", with)...)
		f = append(f, eb.chunkDelays(b, eb.with, eb.withURL, "/v1/responses", firstOnly)...)
		o = append(o, eb.chunkDelays(b, eb.without, eb.withoutURL, "/v1/responses", plain)...)
	}
	for _, m := range []struct {
		name string
		took []time.Duration
	}{{"with", w}, {"first", f}, {"without", o}} {
		p50, p99 := percentiles(m.took)
		b.ReportMetric(float64(p50.Nanoseconds()), "p50-chunk-"+m.name+"-ns")
		b.ReportMetric(float64(p99.Nanoseconds()), "p99-chunk-"+m.name+"-ns")
	}
}
