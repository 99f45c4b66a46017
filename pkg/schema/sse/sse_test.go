package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flushRecorder records what was written at each flush.
type flushRecorder struct {
	bytes.Buffer
	flushed []string
}

func (f *flushRecorder) Flush() { f.flushed = append(f.flushed, f.String()) }

func TestWriter(t *testing.T) {
	var rec flushRecorder
	w := NewWriter(&rec)
	require.NoError(t, w.Event("response.created", []byte("{\n  \"a\": 1\n}")), "named JSON event")
	require.NoError(t, w.Event("", []byte("[DONE]")), "unnamed event")
	require.NoError(t, w.Comment("keep-alive"), "comment")
	require.NoError(t, w.Event("note", []byte("line one\nline two")), "multi-line text")
	want := "event: response.created\ndata: {\"a\":1}\n\n" +
		"data: [DONE]\n\n" +
		": keep-alive\n\n" +
		"event: note\ndata: line one\ndata: line two\n\n"
	assert.Equal(t, want, rec.String(), "stream")
	assert.Len(t, rec.flushed, 4, "one flush per event")
	assert.Equal(t, "event: response.created\ndata: {\"a\":1}\n\n", rec.flushed[0], "the first event leaves alone")
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("gone") }

func TestWriterKeepsTheFirstError(t *testing.T) {
	w := NewWriter(failWriter{})
	assert.Error(t, w.Event("a", []byte("1")), "first write")
	assert.Error(t, w.Comment("x"), "later writes")
	assert.ErrorContains(t, w.Err(), "gone", "the error")
}

func TestReader(t *testing.T) {
	stream := ": comment\r\n" +
		"event: response.created\r\ndata: {\"a\":1}\r\n\r\n" +
		"data: first\ndata: second\n\n" +
		"event: empty\n\n" +
		"id: 7\ndata:no space\n\n" +
		"event: last\ndata: unterminated"
	rd := NewReader(strings.NewReader(stream), 0, 0)
	var got []Event
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "next")
		ev.Data = append([]byte(nil), ev.Data...)
		got = append(got, ev)
	}
	assert.Equal(t, []Event{
		{Name: "response.created", Data: []byte(`{"a":1}`)},
		{Data: []byte("first\nsecond")},
		{ID: "7", Data: []byte("no space")},
		{Name: "last", Data: []byte("unterminated")},
	}, got, "events")
}

// TestReaderIsIncremental: an event is returned once its blank line is read, before the
// stream goes on.
func TestReaderIsIncremental(t *testing.T) {
	pr, pw := io.Pipe()
	rd := NewReader(pr, 0, 0)
	go func() {
		_, _ = io.WriteString(pw, "data: one\n\n")
		// The second event is written only after the test has read the first.
		_, _ = io.WriteString(pw, "data: two\n\n")
		_ = pw.Close()
	}()
	ev, err := rd.Next()
	require.NoError(t, err, "first")
	assert.Equal(t, "one", string(ev.Data), "first event")
	ev, err = rd.Next()
	require.NoError(t, err, "second")
	assert.Equal(t, "two", string(ev.Data), "second event")
	_, err = rd.Next()
	assert.ErrorIs(t, err, io.EOF, "end")
}

func TestReaderBounds(t *testing.T) {
	_, err := NewReader(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 50, 0).Next()
	assert.ErrorIs(t, err, ErrLineTooLong, "a long line")
	_, err = NewReader(strings.NewReader("data: 345678\n\n"), 11, 0).Next()
	assert.ErrorIs(t, err, ErrLineTooLong, "a line one byte over the limit")
	ev, err := NewReader(strings.NewReader("data: 34567\r\n\r\n"), 11, 0).Next()
	assert.NoError(t, err, "a line at the limit")
	assert.Equal(t, "34567", string(ev.Data), "its data")
	_, err = NewReader(strings.NewReader(strings.Repeat("data: xxxxxxxx\n", 20)+"\n"), 0, 100).Next()
	assert.ErrorIs(t, err, ErrEventTooLarge, "many data lines")
	_, err = NewReader(strings.NewReader(strings.Repeat("x", 10_000_000)), 1000, 0).Next()
	assert.ErrorIs(t, err, ErrLineTooLong, "a line that never ends is refused while reading")
}

// FuzzRoundTrip: what the Writer writes, the Reader reads back.
func FuzzRoundTrip(f *testing.F) {
	f.Add("response.output_text.delta", `{"delta":"hi"}`)
	f.Add("", "[DONE]")
	f.Add("x", "a\nb\r\nc")
	f.Fuzz(func(t *testing.T, name, data string) {
		if strings.ContainsAny(name, "\r\n") || data == "" {
			return
		}
		var b bytes.Buffer
		require.NoError(t, NewWriter(&b).Event(name, []byte(data)), "write")
		ev, err := NewReader(&b, 0, 0).Next()
		require.NoError(t, err, "read back %q", b.String())
		assert.Equal(t, name, ev.Name, "name")
		want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(data)
		if got := string(ev.Data); got != want {
			// JSON data is compacted on the way out: compare what it means.
			assert.JSONEq(t, want, got, "data of %q", data)
		}
	})
}
