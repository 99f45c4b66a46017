package loop

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// recordSink records the kinds of the events it takes; the Done event fails when doneErr is set.
type recordSink struct {
	kinds   []schema.EventKind
	last    schema.Event
	doneErr error
}

func (s *recordSink) Event(ev schema.Event) error {
	s.kinds = append(s.kinds, ev.Kind)
	s.last = ev
	if ev.Kind == schema.EventDone {
		return s.doneErr
	}
	return nil
}

// Every stream the Sink began ends with its last event: a Done the Sink could not encode, or an
// answer too large to build, is followed by a Failed event with code stream_failed.
func TestStreamAlwaysEndsWithItsLastEvent(t *testing.T) {
	tests := []struct {
		name      string
		sink      *recordSink
		maxAnswer int
		wantStop  StopReason
	}{
		{name: "done not encoded", sink: &recordSink{doneErr: errors.New("cannot encode")}, wantStop: StopDone},
		{name: "answer too large", sink: &recordSink{}, maxAnswer: 64, wantStop: StopAnswerTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, scripted{status: 200, body: respText("2", "The answer is 42.")})
			req := f.request(t, respSurface, responsesClient, respCall("1", "print(40+2)", 10))
			req.Sink, req.MaxAnswerBytes = tt.sink, tt.maxAnswer
			res := f.engine.Run(context.Background(), req)
			assert.Equal(t, tt.wantStop, res.Stop, "%s: stop", tt.name)
			require.NotEmpty(t, tt.sink.kinds, "%s: events", tt.name)
			assert.Equal(t, schema.EventFailed, tt.sink.kinds[len(tt.sink.kinds)-1], "%s: the last event", tt.name)
			assert.Equal(t, "stream_failed", gjson.GetBytes(tt.sink.last.Body, "error.code").String(), "%s: %s", tt.name, tt.sink.last.Body)
			assert.Equal(t, http.StatusBadGateway, tt.sink.last.Status, "%s: status", tt.name)
		})
	}
}

// A stream whose loop was cancelled (the client went away) gets nothing more.
func TestCancelledStreamGetsNoLastEvent(t *testing.T) {
	f := newFixture(t)
	req := f.request(t, respSurface, responsesClient, respCall("1", "print(40+2)", 10))
	sink := &recordSink{}
	req.Sink = sink
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := f.engine.Run(ctx, req)
	assert.Equal(t, StopCanceled, res.Stop, "stop")
	assert.NotContains(t, sink.kinds, schema.EventFailed, "no failure event to a client that is gone")
}

// An upstream error answer larger than what may be sent is answer_too_large, not passed on.
func TestUpstreamErrorBeyondAnswerBound(t *testing.T) {
	big := `{"error":{"message":"` + strings.Repeat("x", 4096) + `","type":"server_error"}}`
	f := newFixture(t, scripted{status: 500, body: big})
	req := f.request(t, respSurface, responsesClient, respCall("1", "print(40+2)", 10))
	req.MaxAnswerBytes = 1024
	res := f.engine.Run(context.Background(), req)
	assert.Equal(t, StopAnswerTooLarge, res.Stop, "stop")
	assert.Equal(t, http.StatusBadGateway, res.Status, "status")
	assert.Equal(t, "answer_too_large", gjson.GetBytes(res.Body, "error.code").String(), "body %s", res.Body)
}
