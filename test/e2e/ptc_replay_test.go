package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// The recorded exchange of the reference (anthropic-ptc-files-skills.md §1.3–§1.6): real
// traffic of Anthropic's API saved as test fixtures by vercel/ai
// (packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.json @24ed6a3, its
// "steps" bodies, and anthropic-programmatic-tool-calling.1.chunks.txt), in
// testdata/ptc_recorded. A dice game: the model writes a cell that calls the client's rollDie
// from code (two at once with asyncio.gather, plain; one at a time, streamed) until a player
// has won three rounds; every pause is answered with the rolls the recording's stdout shows, so
// that the cell prints what it printed natively.
//
// The replay drives the same conversation through codeinterp, the fake model scripted to
// answer as the recorded model did (its text and its cell, then its final text), and compares
// every answer and every event to the recorded one after normalising what cannot be the same:
// ids (each replaced by its prefix and its rank of appearance, so that which id refers to which
// is still compared), expires_at, nonzero usage numbers (zero stays zero: a pause's usage is
// 0/0), the code execution version in caller.type (the recording used code_execution_20250825,
// which natively no longer serves programmatic tool calling; the replay uses _20260120, checked
// apart), the order of a pause's calls made at once (asyncio's scheduling, natively as it
// came), the split of a block's text and input into deltas, and pings.

// recordedModel is the model of the recording, which the fake model answers as.
const recordedModel = "claude-sonnet-4-5-20250929"

// TestPTCRecordedExchange replays the reference's recorded PTC exchange, plain and streamed,
// through both fronts.
func TestPTCRecordedExchange(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		t.Run("plain", func(t *testing.T) { replayPlain(t, s) })
		t.Run("stream", func(t *testing.T) { replayStream(t, s) })
	})
}

// replayTools are the recording's tools, with code_execution_20260120.
var replayTools = []any{
	map[string]any{"type": "code_execution_20260120", "name": "code_execution"},
	map[string]any{"name": "rollDie", "description": "Roll a die for a player and return the number rolled.",
		"input_schema":    map[string]any{"type": "object", "properties": map[string]any{"player": map[string]any{"type": "string"}}, "required": []any{"player"}},
		"allowed_callers": []any{"code_execution_20260120"}},
}

// replayPrompt is the user's prompt (the recording does not hold it).
const replayPrompt = "Two players roll dice until one has won 3 rounds; one of them has a loaded die. Who?"

func replayPlain(t *testing.T, s *Stack) {
	var recorded []map[string]any
	readJSON(t, "testdata/ptc_recorded/plain.json", &recorded)
	require.Len(t, recorded, 5, "the recording's steps")
	// The rolls each pause is answered with, as the recorded stdout shows them.
	rolls := []map[string]string{
		{"player1": "6", "player2": "6"}, {"player1": "5", "player2": "4"},
		{"player1": "6", "player2": "4"}, {"player1": "6", "player2": "3"},
	}
	first, final := recorded[0], recorded[len(recorded)-1]
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(upstreamAnswer(1, first["content"].([]any), first["usage"], "tool_use")),
		fakemodel.JSON(upstreamAnswer(2, final["content"].([]any), final["usage"], "end_turn")))
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })

	ours, theirs := newNormaliser(), newNormaliser()
	messages := []any{map[string]any{"role": "user", "content": replayPrompt}}
	container := ""
	for k, want := range recorded {
		body := replayPost(t, s, messages, container, false)
		var got map[string]any
		require.NoError(t, json.Unmarshal(body, &got), "answer %d: %s", k+1, body)
		checkCallers(t, got["content"], fmt.Sprintf("answer %d", k+1))
		assert.Equal(t, theirs.norm(want), ours.norm(got), "answer %d as recorded: %s", k+1, body)
		if got["stop_reason"] != "tool_use" {
			break
		}
		require.Less(t, k, len(rolls), "a pause the recording does not have: %s", body)
		if c, ok := got["container"].(map[string]any); ok {
			container, _ = c["id"].(string)
		}
		messages = append(messages, map[string]any{"role": "assistant", "content": got["content"]},
			toolResults(t, got["content"].([]any), func(player string) string { return rolls[k][player] }))
	}
	assert.Len(t, s.Model.RequestsTo(messagesPath)[mark:], 2, "the model was called for the first and the last answer only")
}

func replayStream(t *testing.T, s *Stack) {
	recorded := readEvents(t, "testdata/ptc_recorded/stream.jsonl")
	require.Len(t, recorded, 15, "the recording's responses")
	// Response 1's text and cell, and the final response's text, as the model wrote them.
	text, code := deltas(recorded[0], 0, "text_delta"), deltas(recorded[0], 1, "input_json_delta")
	var input map[string]any
	require.NoError(t, json.Unmarshal([]byte(code), &input), "the recorded cell's input")
	require.Equal(t, recordedModel, recorded[0][0]["message"].(map[string]any)["model"], "the recorded model")
	last := recorded[len(recorded)-1]
	mark := len(s.Model.RequestsTo(messagesPath))
	s.Model.Enqueue(messagesPath,
		fakemodel.JSON(upstreamAnswer(1, []any{map[string]any{"type": "text", "text": text},
			map[string]any{"type": "server_tool_use", "id": "srvtoolu_up", "name": "code_execution", "input": input}}, streamUsage(recorded[0]), "tool_use")),
		fakemodel.JSON(upstreamAnswer(2, []any{map[string]any{"type": "text", "text": deltas(last, 1, "text_delta")}},
			streamUsage(last), "end_turn")))
	t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
	// One call per pause, in the order the cell makes them: each round's player 1, then player 2.
	rolls := strings.Fields("5 6 4 6 5 2 6 6 3 2 6 6 2 3")

	ours, theirs := newNormaliser(), newNormaliser()
	messages := []any{map[string]any{"role": "user", "content": replayPrompt}}
	container, call := "", 0
	for k, want := range recorded {
		raw := replayPost(t, s, messages, container, true)
		got := parseSSE(t, raw)
		assert.Equal(t, theirs.normEvents(want), ours.normEvents(got), "response %d's events as recorded: %s", k+1, raw)
		msg := accumulate(t, got)
		checkCallers(t, msg["content"], fmt.Sprintf("response %d", k+1))
		if msg["stop_reason"] != "tool_use" {
			break
		}
		if c, ok := msg["container"].(map[string]any); ok {
			container, _ = c["id"].(string)
		}
		messages = append(messages, map[string]any{"role": "assistant", "content": msg["content"]},
			toolResults(t, msg["content"].([]any), func(string) string {
				require.Less(t, call, len(rolls), "a call the recording does not have")
				call++
				return rolls[call-1]
			}))
	}
	assert.Equal(t, len(rolls), call, "every recorded call was made")
	assert.Len(t, s.Model.RequestsTo(messagesPath)[mark:], 2, "the model was called for the first and the last response only")
}

// upstreamAnswer is the model's answer behind a recorded one: its content without what
// codeinterp adds (the calls made from code, the cell's result), its cell a call of the
// code_execution tool as the model sees it.
func upstreamAnswer(n int, content []any, usage any, stop string) json.RawMessage {
	var blocks []any
	for _, b := range content {
		m := b.(map[string]any)
		switch m["type"] {
		case "text":
			blocks = append(blocks, map[string]any{"type": "text", "text": m["text"]})
		case "server_tool_use":
			blocks = append(blocks, map[string]any{"type": "tool_use", "id": "toolu_model_cell", "name": m["name"], "input": m["input"]})
		}
	}
	raw, _ := json.Marshal(map[string]any{"id": "msg_upstream" + strconv.Itoa(n), "type": "message", "role": "assistant", "model": recordedModel,
		"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
	return raw
}

// streamUsage is the usage of the whole answer a recorded response streamed: its message_start's,
// updated by its message_delta's.
func streamUsage(events []map[string]any) map[string]any {
	u := map[string]any{}
	for _, e := range events {
		var part map[string]any
		switch e["type"] {
		case "message_start":
			part, _ = e["message"].(map[string]any)["usage"].(map[string]any)
		case "message_delta":
			part, _ = e["usage"].(map[string]any)
		}
		for k, v := range part {
			u[k] = v
		}
	}
	return u
}

// replayPost sends a Messages request of the conversation (the container named when not "")
// and returns the 200 answer's body.
func replayPost(t *testing.T, s *Stack, messages []any, container string, stream bool) []byte {
	t.Helper()
	req := map[string]any{"model": recordedModel, "max_tokens": 4096, "tools": replayTools, "messages": messages}
	if stream {
		req["stream"] = true
	}
	if container != "" {
		req["container"] = container
	}
	raw, err := json.Marshal(req)
	require.NoError(t, err, "encode the request")
	hr, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.Front.URL()+"/v1/messages", bytes.NewReader(raw))
	require.NoError(t, err, "new request")
	hr.Header.Set("content-type", "application/json")
	hr.Header.Set("x-api-key", messagesAPIKey)
	hr.Header.Set("anthropic-version", "2023-06-01")
	res, err := (&http.Client{Transport: s.transport, Timeout: time.Minute}).Do(hr)
	require.NoError(t, err, "POST /v1/messages")
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err, "read the answer")
	require.Equal(t, http.StatusOK, res.StatusCode, "the answer: %s", body)
	return body
}

// toolResults is the user message answering the calls made from code in content, each with
// roll(its player).
func toolResults(t *testing.T, content []any, roll func(player string) string) map[string]any {
	t.Helper()
	var results []any
	for _, b := range content {
		m := b.(map[string]any)
		if m["type"] != "tool_use" {
			continue
		}
		player, _ := m["input"].(map[string]any)["player"].(string)
		results = append(results, map[string]any{"type": "tool_result", "tool_use_id": m["id"], "content": roll(player)})
	}
	require.NotEmpty(t, results, "the calls of a pause: %v", content)
	return map[string]any{"role": "user", "content": results}
}

// checkCallers checks what the normalising leaves out: a call made from code names
// code_execution_20260120, the replay's version.
func checkCallers(t *testing.T, content any, what string) {
	t.Helper()
	blocks, _ := content.([]any)
	for i, b := range blocks {
		m := b.(map[string]any)
		if c, ok := m["caller"].(map[string]any); ok && m["type"] == "tool_use" {
			assert.Equal(t, "code_execution_20260120", c["type"], "%s: block %d's caller", what, i)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err, "read %s", path)
	require.NoError(t, json.Unmarshal(raw, v), "decode %s", path)
}

// readEvents reads a recorded stream (one event a line, the responses one after another) as its
// responses' events.
func readEvents(t *testing.T, path string) [][]map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err, "read %s", path)
	var out [][]map[string]any
	var cur []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &e), "decode %q", line)
		cur = append(cur, e)
		if e["type"] == "message_stop" {
			out, cur = append(out, cur), nil
		}
	}
	require.Empty(t, cur, "the recording ends with message_stop")
	return out
}

// parseSSE returns the events of an SSE body, each checked against its event: line.
func parseSSE(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var e map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e), "an event: %s", line)
			assert.Equal(t, name, e["type"], "the event: line names the event's type")
			out = append(out, e)
		}
	}
	require.NoError(t, sc.Err(), "read the stream")
	return out
}

// deltas returns the concatenated deltas of kind of block index of a response's events.
func deltas(events []map[string]any, index int, kind string) string {
	var b strings.Builder
	for _, e := range events {
		if e["type"] != "content_block_delta" || e["index"] != float64(index) {
			continue
		}
		d := e["delta"].(map[string]any)
		if d["type"] == kind {
			b.WriteString(fmt.Sprint(d["text"], d["partial_json"]))
		}
	}
	return strings.NewReplacer("<nil>", "").Replace(b.String())
}

// accumulate builds the message a response's events carry, as an SDK's accumulator does.
func accumulate(t *testing.T, events []map[string]any) map[string]any {
	t.Helper()
	require.NotEmpty(t, events, "events")
	msg := events[0]["message"].(map[string]any)
	content, _ := msg["content"].([]any)
	partial := map[int]string{}
	for _, e := range events[1:] {
		switch e["type"] {
		case "content_block_start":
			content = append(content, e["content_block"])
		case "content_block_delta":
			i := int(e["index"].(float64))
			d := e["delta"].(map[string]any)
			b := content[i].(map[string]any)
			switch d["type"] {
			case "text_delta":
				b["text"] = b["text"].(string) + d["text"].(string)
			case "input_json_delta":
				partial[i] += d["partial_json"].(string)
			}
		case "content_block_stop":
			i := int(e["index"].(float64))
			if p, ok := partial[i]; ok && p != "" {
				var in any
				require.NoError(t, json.Unmarshal([]byte(p), &in), "block %d's input", i)
				content[i].(map[string]any)["input"] = in
			}
		case "message_delta":
			for k, v := range e["delta"].(map[string]any) {
				msg[k] = v
			}
		}
	}
	msg["content"] = content
	return msg
}

// normaliser replaces what a replay cannot reproduce (see the top of this file). Its ids keep
// their rank across one conversation's answers.
type normaliser struct{ ids map[string]string }

func newNormaliser() *normaliser { return &normaliser{ids: map[string]string{}} }

var idPrefix = regexp.MustCompile(`^[a-z]+_`)

func (n *normaliser) id(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	if _, ok := n.ids[s]; !ok {
		n.ids[s] = idPrefix.FindString(s) + "#" + strconv.Itoa(len(n.ids)+1)
	}
	return n.ids[s]
}

// norm returns v normalised; inUsage reports whether v is under a usage object.
func (n *normaliser) norm(v any) any { return n.walk(v, false) }

func (n *normaliser) walk(v any, inUsage bool) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch e := x[k]; {
			case k == "id" || k == "tool_use_id" || k == "tool_id":
				out[k] = n.id(e)
			case k == "expires_at":
				_, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e))
				out[k] = fmt.Sprintf("<time, parsed: %v>", err == nil)
			case k == "type" && strings.HasPrefix(fmt.Sprint(e), "code_execution_20"):
				out[k] = "code_execution_<version>"
			case k == "content":
				out[k] = n.walk(sortCalls(e), inUsage)
			case inUsage && (k == "web_fetch_requests" || k == "code_execution_requests"):
				// Ours, not the recording's, and they stay: the SDKs require web_fetch_requests
				// (newer than the recording), and Anthropic's docs show code_execution_requests.
			default:
				out[k] = n.walk(e, inUsage || k == "usage")
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = n.walk(e, inUsage)
		}
		return out
	case float64:
		if inUsage && x != 0 {
			return "<nonzero>"
		}
		return x
	}
	return v
}

// sortCalls orders each run of calls made from code in content by their input: calls made at
// once come in the order the runtime scheduled them.
func sortCalls(v any) any {
	blocks, ok := v.([]any)
	if !ok {
		return v
	}
	out := slices.Clone(blocks)
	isCall := func(b any) bool {
		m, _ := b.(map[string]any)
		_, caller := m["caller"].(map[string]any)
		return m["type"] == "tool_use" && caller
	}
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && isCall(out[j]) {
			j++
		}
		if j == i {
			i++
			continue
		}
		slices.SortStableFunc(out[i:j], func(a, b any) int {
			ia, _ := json.Marshal(a.(map[string]any)["input"])
			ib, _ := json.Marshal(b.(map[string]any)["input"])
			return bytes.Compare(ia, ib)
		})
		i = j
	}
	return out
}

// normEvents normalises a response's events: pings dropped, a block's consecutive deltas of
// one kind joined (an input's JSON decoded), then each event normalised.
func (n *normaliser) normEvents(events []map[string]any) []any {
	var out []any
	for _, e := range events {
		if e["type"] == "ping" {
			continue
		}
		if e["type"] == "content_block_delta" && len(out) > 0 {
			prev, _ := out[len(out)-1].(map[string]any)
			d, pd := e["delta"].(map[string]any), map[string]any(nil)
			if prev != nil && prev["type"] == "content_block_delta" && prev["index"] == e["index"] {
				pd = prev["delta"].(map[string]any)
			}
			if pd != nil && pd["type"] == d["type"] {
				pd["text"] = fmt.Sprint(pd["text"]) + fmt.Sprint(d["text"])
				pd["partial_json"] = fmt.Sprint(pd["partial_json"]) + fmt.Sprint(d["partial_json"])
				continue
			}
		}
		c := map[string]any{}
		for k, v := range e {
			c[k] = v
		}
		if m, ok := e["message"].(map[string]any); ok && e["type"] == "message_start" && m["stop_reason"] == nil {
			// An answer the model streams: its message_start's output tokens are the model's so
			// far natively; the whole answer codeinterp relays tells none (0).
			mc := map[string]any{}
			for k, v := range m {
				mc[k] = v
			}
			if u, ok := m["usage"].(map[string]any); ok {
				uc := map[string]any{}
				for k, v := range u {
					uc[k] = v
				}
				uc["output_tokens"] = "<the model's so far>"
				mc["usage"] = uc
			}
			c["message"] = mc
		}
		if d, ok := e["delta"].(map[string]any); ok && e["type"] == "content_block_delta" {
			dc := map[string]any{}
			for k, v := range d {
				dc[k] = v
			}
			c["delta"] = dc
		}
		out = append(out, c)
	}
	for i, e := range out {
		m := e.(map[string]any)
		if d, ok := m["delta"].(map[string]any); ok && m["type"] == "content_block_delta" {
			switch d["type"] {
			case "text_delta":
				d["text"] = strings.ReplaceAll(fmt.Sprint(d["text"]), "<nil>", "")
				delete(d, "partial_json")
			case "input_json_delta":
				var in any
				_ = json.Unmarshal([]byte(strings.ReplaceAll(fmt.Sprint(d["partial_json"]), "<nil>", "")), &in)
				d["partial_json"] = in
				delete(d, "text")
			}
		}
		out[i] = n.norm(m)
	}
	return out
}
