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

// writeEvent frames an event as the surfaces write theirs: an "event:" line when named, one
// "data:" line per line of data (split at \n, \r\n and \r), and a blank line.
func writeEvent(b *bytes.Buffer, name, data string) {
	if name != "" {
		b.WriteString("event: " + name + "\n")
	}
	for _, line := range strings.Split(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(data), "\n") {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("\n")
}

// FuzzRoundTrip: what is framed as an event, the Reader reads back.
func FuzzRoundTrip(f *testing.F) {
	f.Add("response.output_text.delta", `{"delta":"hi"}`)
	f.Add("", "[DONE]")
	f.Add("x", "a\nb\r\nc")
	f.Fuzz(func(t *testing.T, name, data string) {
		if strings.ContainsAny(name, "\r\n") || data == "" {
			return
		}
		var b bytes.Buffer
		writeEvent(&b, name, data)
		ev, err := NewReader(&b, 0, 0).Next()
		require.NoError(t, err, "read back %q", b.String())
		assert.Equal(t, name, ev.Name, "name")
		want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(data)
		assert.Equal(t, want, string(ev.Data), "data of %q", data)
	})
}
