// Package sse reads server-sent events (the text/event-stream format of the WHATWG HTML
// standard, https://html.spec.whatwg.org/multipage/server-sent-events.html) incrementally: a
// [Reader] yields each event of a stream as soon as its blank line arrives, with every line
// bounded, so an upstream that never ends a line cannot grow the reader. Each surface writes
// its own event stream (its events have a fixed, compact shape).
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Event is one event of a stream.
type Event struct {
	// Name is the "event:" field; empty for an unnamed event (Chat Completions streams).
	Name string
	// Data is the event's data: its "data:" lines joined with "\n".
	Data []byte
	// ID is the "id:" field, if any.
	ID string
}

// ErrLineTooLong is returned by [Reader.Next] for a line longer than the reader's limit.
var ErrLineTooLong = errors.New("sse: line too long")

// ErrEventTooLarge is returned by [Reader.Next] for an event whose data exceeds the limit.
var ErrEventTooLarge = errors.New("sse: event too large")

// Reader reads events from a stream. It is not safe for concurrent use.
type Reader struct {
	br      *bufio.Reader
	maxLine int
	maxData int
	ev      Event
	data    bytes.Buffer
}

// NewReader returns a Reader of r whose lines are at most maxLine bytes and whose events carry
// at most maxData bytes of data (zero means 1 MiB and 16 MiB).
func NewReader(r io.Reader, maxLine, maxData int) *Reader {
	if maxLine <= 0 {
		maxLine = 1 << 20
	}
	if maxData <= 0 {
		maxData = 16 << 20
	}
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), maxLine: maxLine, maxData: maxData}
}

// Next returns the next event, as soon as the blank line that ends it has been read. A stream
// that ends in the middle of an event yields that event (as browsers do not, but as every SDK
// parsing an LLM stream does), then io.EOF. Comments and events without data are skipped.
// The returned Data is valid until the next call.
func (rd *Reader) Next() (Event, error) {
	rd.ev, rd.data = Event{}, bytes.Buffer{}
	hasData := false
	for {
		line, err := rd.line()
		if err != nil {
			if errors.Is(err, io.EOF) && hasData {
				rd.ev.Data = rd.data.Bytes()
				return rd.ev, nil
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if hasData {
				rd.ev.Data = rd.data.Bytes()
				return rd.ev, nil
			}
			rd.ev = Event{}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			rd.ev.Name = string(value)
		case "data":
			if hasData {
				rd.data.WriteByte('\n')
			}
			if rd.data.Len()+len(value) > rd.maxData {
				return Event{}, ErrEventTooLarge
			}
			rd.data.Write(value)
			hasData = true
		case "id":
			rd.ev.ID = string(value)
		}
	}
}

// line reads one line without its end (\n or \r\n; a lone \r, which the standard also allows
// and no LLM API sends, stays in the line), at most maxLine bytes.
func (rd *Reader) line() ([]byte, error) {
	var out []byte
	for {
		chunk, err := rd.br.ReadSlice('\n')
		out = append(out, chunk...)
		// The line's end (\r\n at most) is not part of the line.
		if n := len(bytes.TrimSuffix(bytes.TrimSuffix(out, []byte("\n")), []byte("\r"))); n > rd.maxLine {
			return nil, ErrLineTooLong
		}
		switch {
		case err == nil:
			out = bytes.TrimSuffix(out[:len(out)-1], []byte("\r"))
			return out, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(out) > 0:
			return out, nil
		default:
			return nil, err
		}
	}
}
