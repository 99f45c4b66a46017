package responses_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
	"github.com/codeinterp/codeinterp/pkg/schema/sse"
)

// scriptRound is one round a test plays as the loop would: its upstream answer, whether the
// answer streams (and how its deltas are cut: nil keeps the upstream's), the runs of its
// calls (their ids are given by the exchange, as the loop asks them), and whether the
// follow-up that asked for it told the model to answer in text (its calls never run).
type scriptRound struct {
	body     []byte
	stream   bool
	cut      *rand.Rand
	calls    []schema.CodeCall
	textOnly bool
	// createdID, if set, is the id of the stream's response.created (an upstream whose
	// stream names its response otherwise than its answer).
	createdID string
}

// play feeds the rounds to x's sink writing to buf as the loop does (follow-ups built, each
// answer streamed or whole, each call started and done with the id the exchange gave it),
// calls at, if set, after each step with its name, and returns the final answer.
func play(t *testing.T, x schema.Exchange, buf *bytes.Buffer, rounds []scriptRound, at func(step string)) []byte {
	t.Helper()
	if at == nil {
		at = func(string) {}
	}
	sink := x.Events(buf)
	emit := func(ev schema.Event) { require.NoError(t, sink.Event(ev), "event %v of round %d", ev.Kind, ev.Round) }
	var done []schema.Round
	var outputs []schema.CallOutput
	ids, _ := x.(schema.CallIDs)
	for i, r := range rounds {
		if i > 0 {
			_, err := x.FollowUp(outputs, schema.FollowUpOptions{Stream: r.stream, ToolChoiceNone: r.textOnly})
			require.NoError(t, err, "follow-up of round %d", i)
		}
		body := r.body
		if r.stream {
			body = streamRound(t, x, sink, i, r.body, r.cut, r.createdID, at)
			require.JSONEq(t, string(r.body), string(body), "round %d: the stream's answer", i)
		}
		turn, err := x.ParseTurn(body)
		require.NoError(t, err, "round %d", i)
		emit(schema.Event{Kind: schema.EventRound, Round: i, Body: body})
		at(fmt.Sprintf("round %d", i))
		if r.textOnly {
			done = append(done, schema.Round{Body: body})
			break
		}
		require.Len(t, r.calls, len(turn.Calls), "round %d: runs for its calls", i)
		outputs = outputs[:0]
		var ran []schema.CodeCall
		for k, c := range turn.Calls {
			run := r.calls[k]
			run.Code = c.Code
			if ids != nil {
				run.ID = ids.CodeCallID(i, k, c.CallID)
			}
			if run.ID == "" {
				run.ID = fmt.Sprintf("ci_loop_%d_%d", i, k)
			}
			started := run
			started.Status, started.Outputs, started.Files = "in_progress", []schema.CodeOutput{}, nil
			emit(schema.Event{Kind: schema.EventCallStarted, Round: i, Call: &started})
			at(fmt.Sprintf("started %d.%d", i, k))
			emit(schema.Event{Kind: schema.EventCallDone, Round: i, Call: &run})
			ran = append(ran, run)
			outputs = append(outputs, schema.CallOutput{CallID: c.CallID, Output: "ok"})
		}
		done = append(done, schema.Round{Body: body, Calls: ran})
	}
	final, err := x.Final(done, "")
	require.NoError(t, err, "final")
	emit(schema.Event{Kind: schema.EventDone, Body: final})
	return final
}

// streamRound feeds the upstream event stream of answer, its deltas cut by cut (if set), to a
// new UpstreamStream of x and its deltas to sink as round's, and returns the stream's answer.
func streamRound(t *testing.T, x schema.Exchange, sink schema.Sink, round int, answer []byte, cut *rand.Rand, createdID string, at func(string)) []byte {
	t.Helper()
	stream, err := responses.SSE(answer)
	require.NoError(t, err)
	us := x.(schema.StreamReader).ReadStream()
	rd := sse.NewReader(bytes.NewReader(stream), 0, 0)
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("round %d: the stream ended without an answer", round)
		}
		require.NoError(t, err)
		if ev.Name == "response.created" && createdID != "" {
			ev.Data, err = sjson.SetBytes(bytes.Clone(ev.Data), "response.id", createdID)
			require.NoError(t, err)
		}
		for _, data := range cutDelta(t, ev.Data, cut) {
			delta, body, err := us.Event(ev.Name, data)
			require.NoError(t, err, "round %d: event %s", round, ev.Name)
			if delta != nil {
				require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDelta, Round: round, Body: delta}))
				at(fmt.Sprintf("delta %d %s", round, gjson.GetBytes(delta, "type").String()))
			}
			if body != nil {
				return body
			}
		}
	}
}

// cutDelta returns the event data, or, for a *.delta event and a cut, the events of its delta
// cut at random rune boundaries.
func cutDelta(t *testing.T, data []byte, cut *rand.Rand) [][]byte {
	t.Helper()
	d := gjson.GetBytes(data, "delta")
	if cut == nil || !strings.HasSuffix(gjson.GetBytes(data, "type").String(), ".delta") || d.Type != gjson.String {
		return [][]byte{data}
	}
	var out [][]byte
	for s := d.Str; len(s) > 0; {
		n := 0
		for k := 1 + cut.IntN(6); k > 0 && n < len(s); k-- {
			_, size := utf8.DecodeRuneInString(s[n:])
			n += size
		}
		piece, err := sjson.SetBytes(bytes.Clone(data), "delta", s[:n])
		require.NoError(t, err)
		out = append(out, piece)
		s = s[n:]
	}
	return out
}

// accumulated is what a client that accumulates a Responses stream gets (as the SDKs' stream
// helpers do): the response of response.created, the items by output index (as added, and
// as done), the code and text their deltas make, and the final response.
type accumulated struct {
	created string
	added   []string
	done    map[int]string
	codes   map[int]string
	texts   map[int]string
	anns    map[int][]string
	final   string
	types   []string
}

func accumulate(t *testing.T, stream []byte) accumulated {
	t.Helper()
	a := accumulated{done: map[int]string{}, codes: map[int]string{}, texts: map[int]string{}, anns: map[int][]string{}}
	for i, ev := range parseSSE(t, stream) {
		d := gjson.Parse(ev.data)
		require.True(t, d.IsObject(), "event %d is JSON: %s", i, ev.data)
		assert.Equal(t, int64(i), d.Get("sequence_number").Int(), "event %d's sequence_number", i)
		assert.Equal(t, ev.typ, d.Get("type").String(), "event %d's type", i)
		idx := int(d.Get("output_index").Int())
		line := ev.typ
		if d.Get("output_index").Exists() {
			line += fmt.Sprintf(" output_index=%d", idx)
			if ev.typ != "response.output_item.added" {
				require.Less(t, idx, len(a.added), "event %d (%s) of an item not added: %s", i, ev.typ, stream)
			}
			_, isDone := a.done[idx]
			assert.False(t, isDone, "event %d (%s) after its item is done", i, ev.typ)
		}
		a.types = append(a.types, line)
		switch ev.typ {
		case "response.created":
			require.Zero(t, i, "response.created first")
			a.created = d.Get("response").Raw
		case "response.output_item.added":
			// The index of an added item is the next one: the helpers append it.
			require.Equal(t, len(a.added), idx, "event %d adds item %d in order", i, idx)
			a.added = append(a.added, d.Get("item").Raw)
		case "response.output_item.done":
			a.done[idx] = d.Get("item").Raw
		case "response.code_interpreter_call_code.delta":
			a.codes[idx] += d.Get("delta").String()
		case "response.code_interpreter_call_code.done":
			assert.Equal(t, a.codes[idx], d.Get("code").String(), "code.done of item %d is its deltas", idx)
		case "response.output_text.delta":
			a.texts[idx] += d.Get("delta").String()
		case "response.output_text.annotation.added":
			assert.Equal(t, int64(len(a.anns[idx])), d.Get("annotation_index").Int(), "annotation_index of event %d", i)
			a.anns[idx] = append(a.anns[idx], d.Get("annotation").Raw)
		case "response.completed":
			a.final = d.Get("response").Raw
		}
	}
	return a
}

// checkWhole checks that a client accumulating stream gets the answer final: the same
// response named by the same id from the start, each of its items added with its id and done
// as it is, code and text deltas that make each item's code and text.
func checkWhole(t *testing.T, stream, final []byte) accumulated {
	t.Helper()
	a := accumulate(t, stream)
	assert.JSONEq(t, string(final), a.final, "the completed response is the answer")
	assert.Equal(t, gjson.GetBytes(final, "id").String(), gjson.Get(a.created, "id").String(), "response.created names the answer")
	assert.JSONEq(t, gjson.GetBytes(final, "tools").Raw, gjson.Get(a.created, "tools").Raw, "response.created shows the client's tools")
	output := gjson.GetBytes(final, "output").Array()
	require.Len(t, a.added, len(output), "items added\n%s", stream)
	for i, item := range output {
		assert.Equal(t, item.Get("id").String(), gjson.Get(a.added[i], "id").String(), "id of item %d as added", i)
		assert.Equal(t, item.Get("type").String(), gjson.Get(a.added[i], "type").String(), "type of item %d as added", i)
		require.Contains(t, a.done, i, "item %d done", i)
		assert.JSONEq(t, item.Raw, a.done[i], "item %d as done", i)
		switch item.Get("type").String() {
		case "code_interpreter_call":
			assert.Equal(t, item.Get("code").String(), a.codes[i], "code deltas of item %d", i)
		case "message":
			assert.Equal(t, item.Get("content.0.text").String(), a.texts[i], "text deltas of item %d", i)
			assert.JSONEq(t, item.Get("content.0.annotations").Raw, "["+strings.Join(a.anns[i], ",")+"]", "annotation.added events of item %d", i)
		}
	}
	return a
}

func message(id, text string) string {
	m, _ := sjson.Set(`{"type":"message","id":"","role":"assistant","status":"completed","content":[{"type":"output_text","text":"","annotations":[],"logprobs":[]}]}`, "id", id)
	m, _ = sjson.Set(m, "content.0.text", text)
	return m
}

func callArgs(id, arguments string) string {
	c, _ := sjson.Set(`{"type":"function_call","id":"","call_id":"","name":"code_interpreter","arguments":"","status":"completed"}`, "id", "fc_"+id)
	c, _ = sjson.Set(c, "call_id", "call_"+id)
	c, _ = sjson.Set(c, "arguments", arguments)
	return c
}

func codeArgs(code string) string {
	b, _ := json.Marshal(map[string]string{"code": code})
	return string(b)
}

func ran(out string, files ...schema.CodeFile) schema.CodeCall {
	return schema.CodeCall{Status: "completed", ContainerID: "cntr_1", Outputs: []schema.CodeOutput{{Type: "logs", Logs: out}}, Files: files}
}

// liveScript is a loop of three rounds: a first answer with a call, a streamed second one
// with text, a call, text after it that links the file the call writes, a second call and
// text after it, and a streamed last answer.
func liveScript(cut *rand.Rand, stream0 bool, code1, code2 string) []scriptRound {
	return []scriptRound{
		{body: answer("1", callArgs("a", codeArgs("print(1)"))), stream: stream0, cut: cut, calls: []schema.CodeCall{ran("1\n", schema.CodeFile{ID: "cfile_0", Path: "/mnt/data/a.txt", Bytes: 1})}},
		{
			body: answer("2", message("msg_2", "Now the next step: /mnt/data/a.txt"), callArgs("c", codeArgs(code1)),
				message("msg_2b", "Saved [the table](sandbox:/mnt/data/out.csv) from /mnt/data/a.txt."), callArgs("d", codeArgs(code2)), message("msg_2c", "after both")),
			stream: true, cut: cut,
			calls: []schema.CodeCall{ran("", schema.CodeFile{ID: "cfile_1", Path: "/mnt/data/out.csv", Bytes: 3}), ran("2\n")},
		},
		{body: answer("3", message("msg_3", "The answer is 3.")), stream: true, cut: cut},
	}
}

func newLive(t *testing.T) schema.Exchange {
	t.Helper()
	x, err := responses.Surface{}.NewExchange([]byte(eventsClient), schema.Options{})
	require.NoError(t, err)
	return x
}

// The calls of a streamed round stream as the model writes them: each call's code deltas
// before the round's answer is complete and before the call runs, the text after a call too,
// and a client that accumulates the stream gets the plain answer, ids included.
func TestEventsStreamCallsAsWritten(t *testing.T) {
	x := newLive(t)
	var buf bytes.Buffer
	var steps []string
	marks := map[string]int{}
	final := play(t, x, &buf, liveScript(rand.New(rand.NewPCG(1, 2)), false, "import csv\nopen('/mnt/data/out.csv','w').write('a,b')", `print("\u00e9 😀")`), func(step string) {
		if _, ok := marks[step]; !ok {
			marks[step] = buf.Len()
			steps = append(steps, step)
		}
	})
	stream := buf.Bytes()
	checkWhole(t, stream, final)

	round1 := marks["round 1"]
	before := string(stream[marks["delta 1 response.output_item.added"]:round1])
	texts, codes := map[string]string{}, 0
	for _, ev := range parseSSE(t, []byte(before)) {
		switch ev.typ {
		case "response.output_text.delta":
			texts[gjson.Get(ev.data, "item_id").String()] += gjson.Get(ev.data, "delta").String()
		case "response.code_interpreter_call_code.delta":
			codes++
		}
	}
	assert.Positive(t, codes, "code streams before the round's answer is complete")
	assert.Equal(t, "Saved [the table](sandbox:/mnt/data/out.csv) from /mnt/data/a.txt.", texts["msg_2b"], "the text after a call streams before the round's answer is complete")
	assert.Equal(t, "after both", texts["msg_2c"], "the text after both calls streams before the round's answer is complete")
	assert.Equal(t, 2, strings.Count(before, "event: response.code_interpreter_call_code.done"), "both calls' code is done before the round's answer")
	assert.NotContains(t, before, "interpreting", "no call of the round runs before its answer")
	assert.NotContains(t, before, `"name":"code_interpreter"`, "the internal call is not relayed")
	assert.Equal(t, 1, strings.Count(string(stream[round1:marks["started 1.0"]]), "event: "), "the first call's start adds only interpreting")

	// The message after the call cites the file the call wrote, as the answer does.
	assert.Contains(t, string(final), `"file_id":"cfile_1"`, "the answer cites the file")
	assert.Contains(t, string(stream[marks["started 1.0"]:]), "response.output_text.annotation.added", "the citation streams once the call ran")

	// The order of the events, each run of deltas as one line: the progressive sequence.
	var order strings.Builder
	last := ""
	for _, line := range accumulate(t, stream).types {
		if line != last || !strings.Contains(line, ".delta ") {
			order.WriteString(line + "\n")
		}
		last = line
	}
	golden(t, filepath.Join("testdata", "events_live.order.golden"), []byte(order.String()))
}

// golden compares got with the file at path, which -update rewrites.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if os.Getenv("UPDATE_GOLDEN") != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "read %s (UPDATE_GOLDEN=1 writes it)", path)
	assert.Equal(t, string(want), string(got), "golden %s", path)
}

// The first answer's stream starts the client's: response.created and in_progress come from
// its response.created (the client's tools, the first turn's id) before its answer is
// complete, and its call streams as the later rounds' do.
func TestEventsFirstAnswerStreams(t *testing.T) {
	x := newLive(t)
	var buf bytes.Buffer
	marks := map[string]int{}
	final := play(t, x, &buf, liveScript(nil, true, "x = 3", "print(x)"), func(step string) {
		if _, ok := marks[step]; !ok {
			marks[step] = buf.Len()
		}
	})
	a := checkWhole(t, buf.Bytes(), final)
	assert.Equal(t, "resp_1", gjson.Get(a.created, "id").String(), "the stream is named after the first turn")
	assert.Equal(t, "in_progress", gjson.Get(a.created, "status").String(), "status in response.created")
	assert.Equal(t, "[]", gjson.Get(a.created, "output").Raw, "no output in response.created")
	before := string(buf.Bytes()[:marks["round 0"]])
	require.True(t, strings.HasPrefix(before, "event: response.created\n"), "the stream starts before the first answer is complete: %s", before)
	assert.Contains(t, before, "event: response.in_progress\n", "in_progress before the first answer is complete")
	assert.Contains(t, before, `"delta":"print(1)"`, "the first call's code streams before the first answer is complete")
}

// A first answer whose stream names its response otherwise than its answer does: the client's
// answer keeps the name its stream started with, whether the loop runs or not.
func TestEventsFirstStreamNamesTheAnswer(t *testing.T) {
	for _, loop := range []bool{false, true} {
		x := newLive(t)
		var buf bytes.Buffer
		rounds := []scriptRound{{body: answer("1", message("msg_1", "no code")), stream: true, createdID: "resp_streamed"}}
		if loop {
			rounds = liveScript(nil, true, "x = 1", "print(x)")
			rounds[0].createdID = "resp_streamed"
		}
		final := play(t, x, &buf, rounds, nil)
		checkWhole(t, buf.Bytes(), final)
		assert.Equal(t, "resp_streamed", gjson.GetBytes(final, "id").String(), "loop %v: the answer's id", loop)
	}
}

// Arguments that are not {"code": …} stream no code: the code is done when the call starts,
// and is the call's.
func TestEventsOtherArguments(t *testing.T) {
	tests := []struct {
		name, args string
		wantLive   bool
	}{
		{name: "no code", args: `{"cmd":"ls -l"}`},
		{name: "code not a string", args: `{"code":["print(1)"]}`},
		{name: "other keys first", args: `{"timeout":5,"note":"a \"quoted\" {x}","code":"print(5)"}`, wantLive: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newLive(t)
			var buf bytes.Buffer
			marks := map[string]int{}
			rounds := []scriptRound{
				{body: answer("1", callArgs("a", tt.args)), stream: true, cut: rand.New(rand.NewPCG(3, 4)), calls: []schema.CodeCall{ran("x")}},
				{body: answer("2", message("msg_2", "done")), stream: true},
			}
			final := play(t, x, &buf, rounds, func(step string) {
				if _, ok := marks[step]; !ok {
					marks[step] = buf.Len()
				}
			})
			checkWhole(t, buf.Bytes(), final)
			before := string(buf.Bytes()[:marks["round 0"]])
			assert.Equal(t, tt.wantLive, strings.Contains(before, "response.code_interpreter_call_code.delta"), "code streams live for %s", tt.args)
			assert.Equal(t, tt.wantLive, strings.Contains(before, "response.code_interpreter_call_code.done"), "code done live for %s", tt.args)
		})
	}
}

// A round asked for in text whose answer still calls the function: the call never runs, and
// neither the stream nor the answer shows it.
func TestEventsTextOnlyRound(t *testing.T) {
	x := newLive(t)
	var buf bytes.Buffer
	rounds := []scriptRound{
		{body: answer("1", callArgs("a", codeArgs("print(1)"))), calls: []schema.CodeCall{ran("1\n")}},
		{body: answer("2", message("msg_2", "I would run more:"), callArgs("b", codeArgs("print(2)")), message("msg_3", "but the answer is 1.")), stream: true, textOnly: true},
	}
	final := play(t, x, &buf, rounds, nil)
	checkWhole(t, buf.Bytes(), final)
	assert.Len(t, gjson.GetBytes(final, "output").Array(), 3, "the call and the two messages")
	assert.NotContains(t, buf.String(), "print(2)", "the call that never runs is not streamed")
}

// Code split inside its escapes and between the halves of a surrogate pair streams whole.
func TestEventsCodeSplitEscapes(t *testing.T) {
	code := "s = \"caf\u00e9 \U0001F600\"\n\tprint(s)\\n"
	args := `{"code":"s = \"caf\u00e9 \ud83d\ude00\"\n\tprint(s)\\n"}`
	got, err := json.Marshal(map[string]string{"code": code})
	require.NoError(t, err)
	require.NotEqual(t, args, string(got), "the arguments escape what Marshal does not")
	for seed := range uint64(20) {
		x := newLive(t)
		var buf bytes.Buffer
		rounds := []scriptRound{
			{body: answer("1", callArgs("a", args)), stream: true, cut: rand.New(rand.NewPCG(seed, 7)), calls: []schema.CodeCall{ran("x")}},
			{body: answer("2", message("msg_2", "done")), stream: true},
		}
		final := play(t, x, &buf, rounds, nil)
		a := checkWhole(t, buf.Bytes(), final)
		assert.Equal(t, code, a.codes[0], "seed %d: the code", seed)
	}
}

// FuzzEventsLiveIsWhole: however the upstream cuts its deltas, and whichever rounds stream, a
// client that accumulates the stream gets the plain answer.
func FuzzEventsLiveIsWhole(f *testing.F) {
	f.Add(uint64(1), uint8(0), "print(1)", "x = '\u00e9'\nprint(x)")
	f.Add(uint64(2), uint8(1), "", "\"\\\U0001F600")
	f.Add(uint64(3), uint8(2), "a\tb", "\u2028")
	f.Fuzz(func(t *testing.T, seed uint64, mode uint8, code1, code2 string) {
		if !utf8.ValidString(code1) || !utf8.ValidString(code2) {
			return
		}
		var cut *rand.Rand
		if mode&1 == 0 {
			cut = rand.New(rand.NewPCG(seed, seed>>7))
		}
		x, err := responses.Surface{}.NewExchange([]byte(eventsClient), schema.Options{})
		require.NoError(t, err)
		var buf bytes.Buffer
		final := play(t, x, &buf, liveScript(cut, mode&2 != 0, code1, code2), nil)
		a := checkWhole(t, buf.Bytes(), final)
		replay, err := responses.SSE(final)
		require.NoError(t, err)
		b := accumulate(t, replay)
		assert.Equal(t, b.codes, a.codes, "codes as the plain answer's stream has them")
		assert.Equal(t, b.texts, a.texts, "texts as the plain answer's stream has them")
	})
}

// A round whose stream adds an item out of order streams live up to it; it and the items after
// it are written when the answer is complete, and the client still gets the plain answer.
func TestEventsOutOfOrderStream(t *testing.T) {
	x := newLive(t)
	var buf bytes.Buffer
	sink := x.Events(&buf)
	body := answer("1", callArgs("a", codeArgs("print(1)")), message("msg_b", "between"), callArgs("c", codeArgs("print(3)")))
	stream, err := responses.SSE(body)
	require.NoError(t, err)
	us := x.(schema.StreamReader).ReadStream()
	for _, ev := range parseSSE(t, stream) {
		data := []byte(ev.data)
		if idx := gjson.GetBytes(data, "output_index"); idx.Exists() && idx.Int() == 1 {
			continue // the stream skips item 1: item 2 arrives out of order
		}
		delta, _, err := us.Event(ev.typ, data)
		require.NoError(t, err, "event %s", ev.typ)
		if delta != nil {
			require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDelta, Body: delta}))
		}
	}
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventRound, Body: body}))
	turn, err := x.ParseTurn(body)
	require.NoError(t, err)
	var calls []schema.CodeCall
	for k, c := range turn.Calls {
		run := ran("ok")
		run.Code = c.Code
		if run.ID = x.(schema.CallIDs).CodeCallID(0, k, c.CallID); run.ID == "" {
			run.ID = fmt.Sprintf("ci_loop_%d", k)
		}
		started := run
		started.Status, started.Outputs = "in_progress", []schema.CodeOutput{}
		require.NoError(t, sink.Event(schema.Event{Kind: schema.EventCallStarted, Call: &started}))
		require.NoError(t, sink.Event(schema.Event{Kind: schema.EventCallDone, Call: &run}))
		calls = append(calls, run)
	}
	assert.NotEqual(t, "ci_loop_0", calls[0].ID, "the call streamed live keeps the stream's id")
	assert.Equal(t, "ci_loop_1", calls[1].ID, "the call after the item out of order is the loop's")
	final, err := x.Final([]schema.Round{{Body: body, Calls: calls}}, "")
	require.NoError(t, err)
	require.NoError(t, sink.Event(schema.Event{Kind: schema.EventDone, Body: final}))
	checkWhole(t, buf.Bytes(), final)
}
