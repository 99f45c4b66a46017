package schematest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/stretchr/testify/require"
)

// SSEEvent is one framed SSE event: its event name (empty for Chat) and its data line.
type SSEEvent struct {
	Name string
	Data string
}

// SSEFrames splits a stream into events, requiring the exact framing: each event is an optional
// `event: <name>` line (required when named), exactly one `data: <json>` line, and a blank line.
func SSEFrames(t testing.TB, stream []byte, named bool) []SSEEvent {
	t.Helper()
	s := string(stream)
	require.True(t, strings.HasSuffix(s, "\n\n"), "stream must end with a blank line: %.200q", s)
	require.NotContains(t, s, "\r", "stream must not contain a carriage return")
	var events []SSEEvent
	for _, block := range strings.Split(strings.TrimSuffix(s, "\n\n"), "\n\n") {
		lines := strings.Split(block, "\n")
		var ev SSEEvent
		if named {
			require.Len(t, lines, 2, "event block must be an event line and a data line: %.300q", block)
			name, ok := strings.CutPrefix(lines[0], "event: ")
			require.True(t, ok, "first line must be the event line: %.300q", block)
			ev.Name = name
			lines = lines[1:]
		}
		require.Len(t, lines, 1, "event block must have one data line: %.300q", block)
		data, ok := strings.CutPrefix(lines[0], "data: ")
		require.True(t, ok, "line must be a data line: %.300q", lines[0])
		require.NotContains(t, data, "\u2028", "raw U+2028 in data line")
		require.NotContains(t, data, "\u2029", "raw U+2029 in data line")
		ev.Data = data
		events = append(events, ev)
	}
	return events
}

// SSESDKStream decodes stream with the SDK's SSE decoder, as the real client does.
func SSESDKStream[T any](stream []byte) *ssestream.Stream[T] {
	res := &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": []string{"text/event-stream"}},
		Body:       io.NopCloser(bytes.NewReader(stream)),
	}
	return ssestream.NewStream[T](ssestream.NewDecoder(res), nil)
}

// SSESDKEvents decodes all events of stream with the SDK.
func SSESDKEvents[T any](t testing.TB, stream []byte) []T {
	t.Helper()
	s := SSESDKStream[T](stream)
	out := make([]T, 0, bytes.Count(stream, []byte("\n\n"))) // events are large: grow once
	for s.Next() {
		out = append(out, s.Current())
	}
	require.NoError(t, s.Err(), "SDK decode of stream")
	return out
}

// SSEMap decodes a JSON object into a generic map.
func SSEMap(t testing.TB, raw string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &m), "decode %.300s", raw)
	return m
}
