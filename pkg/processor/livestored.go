package processor

import (
	"bytes"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// This file streams a background response still running live (issue 24): GET
// /v1/responses/{id}?stream=true, and the create of one with stream: true, get each event as
// the runner records it, and end with the terminal event. An answer at the request phase is
// whole (an ImmediateResponse; Envoy 1.40 answers a StreamedImmediateResponse with a 500 when
// the request body mode is BUFFERED, as the shipped config's is), so the request goes on to
// the upstream, whose answer (a 404 for an id it never issued, any status) is replaced: at its
// response headers the server sets 200 and an event stream and switches the response body to
// FULL_DUPLEX_STREAMED, as for a loop's live answer (switchToFullDuplex), and once Envoy has
// sent the upstream's body the server streams the recorded events as streamed_response chunks,
// reading the record every Poll. Everything runs on the stream's goroutine: a client that goes
// away ends the stream's context, and with it the reading.

// liveStored is a stream of a running background response that the server writes itself, chosen at
// the request phase (see followLive) and delivered once the upstream has answered.
type liveStored struct {
	// surface is the surface whose response is read (a stored GET's stream has none).
	surface schema.Surface
	// ask returns the stream's events after sequence number after (-1: all), nil when the
	// response is gone.
	ask func(after int) *admission.StoredAnswer
	// after is the sequence number of the last event sent, -1 before any.
	after int
	// done reports that the stream was ended: nothing more is answered.
	done bool
	// release gives back the reader's place (see runner.follow), nil for none.
	release func()
}

// liveHeadersMode keeps the response headers coming to the server (which switches the body at
// them) and reads no body of a request asked for a live stream.
var liveHeadersMode = &filterv3.ProcessingMode{ResponseHeaderMode: filterv3.ProcessingMode_SEND}

// canStreamLive reports whether the stream's answer can be switched to FULL_DUPLEX_STREAMED
// at its response headers (see replayReason): otherwise a running response's stream is
// answered whole once it is over (followStored).
func (st *streamState) canStreamLive() bool {
	return !st.noOverride() && st.replayReason() == ""
}

// followLive makes the stream deliver a running response's stream live, from after sequence
// number after; ask reads it (see liveStored.ask). release, when not nil, gives back the
// reader's place when the stream ends; sf is the response's surface.
func (st *streamState) followLive(sf schema.Surface, after int, ask func(after int) *admission.StoredAnswer, release func()) {
	st.following = &liveStored{surface: sf, ask: ask, after: after, release: release}
}

// askAfter returns ask, a reading of a stored answer for the raw query string, with its
// starting_after set to the argument (-1 leaves it out).
func askAfter(query string, ask func(query string) *admission.StoredAnswer) func(after int) *admission.StoredAnswer {
	q, _ := url.ParseQuery(query)
	return func(after int) *admission.StoredAnswer {
		if after < 0 {
			q.Del("starting_after")
		} else {
			q.Set("starting_after", strconv.Itoa(after))
		}
		return ask(q.Encode())
	}
}

// startingAfterOf returns the starting_after of a raw query string, -1 when absent or not a
// number (the stored answer refused it then).
func startingAfterOf(query string) int {
	q, _ := url.ParseQuery(query)
	n, err := strconv.Atoi(q.Get("starting_after"))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// headers answers the upstream's response headers, whatever their status: the client gets a
// 200 event stream, switched to FULL_DUPLEX_STREAMED. A bodyless upstream answer gives Envoy
// no body message to switch on: the stream is then answered whole once it is over.
func (d *liveStored) headers(st *streamState, end bool) *extprocv3.ProcessingResponse {
	if end {
		d.done = true
		ans := d.ask(d.after)
		if ans == nil {
			st.setOutcome("stored_answer_gone")
			return immediate(http.StatusInternalServerError, jsonContentType, d.surface.ErrorBody(&schema.RequestError{
				Status: http.StatusInternalServerError, Message: "The response is no longer stored.", Code: "stored_answer_gone"}),
				"codeinterp_stored_answer_gone")
		}
		return st.followStored(ans, func() *admission.StoredAnswer { return d.ask(d.after) })
	}
	// As a loop's live answer (switchToFullDuplex), with the upstream's status replaced.
	set := switchToFullDuplex.GetResponseHeaders().GetResponse().GetHeaderMutation()
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
				SetHeaders:    append([]*corev3.HeaderValueOption{setHeader(":status", "200")}, set.GetSetHeaders()...),
				RemoveHeaders: set.GetRemoveHeaders(),
			}},
		}},
		ModeOverride: switchToFullDuplex.ModeOverride,
	}
}

func (d *liveStored) body(st *streamState, _ *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) error {
	if d.done || !b.GetEndOfStream() {
		// The upstream's own body is dropped; the events follow its end (a streamed_response
		// may end the body only after Envoy's last chunk).
		return nil
	}
	return d.stream(st, true)
}

func (d *liveStored) trailers(st *streamState, _ *extprocv3.ProcessingRequest) (bool, error) {
	if d.done {
		return false, nil
	}
	// The upstream's body ended with trailers: the trailers answer ends the stream.
	return false, d.stream(st, false)
}

// close gives back the reader's place; it may be called more than once.
func (d *liveStored) close() {
	if d.release != nil {
		d.release()
		d.release = nil
	}
}

// stream sends the events recorded after d.after as they are recorded, reading the record
// every Poll, until the response's stream is over (the terminal event sent), the response is
// gone, the loop deadline has passed (the client resumes from the last event it read) or the
// stream's context ends (the client went away). With end, the last chunk ends the body.
func (d *liveStored) stream(st *streamState, end bool) error {
	d.done = true
	// step sends what was recorded since the last read, and reports whether the stream is over.
	step := func() (bool, error) {
		ans := d.ask(d.after)
		var evs []byte
		if ans != nil && ans.Stream && ans.Status == 200 {
			evs = ans.Body
		}
		if ans == nil || !ans.Live || !ans.Stream || ans.Status != 200 {
			if len(evs) == 0 && !end {
				return true, nil
			}
			return true, st.send(streamedChunk(evs, end))
		}
		if len(evs) > 0 {
			if err := st.send(streamedChunk(evs, false)); err != nil {
				return true, err
			}
			d.after = nextAfter(d.after, evs)
		}
		return false, nil
	}
	if over, err := step(); over || err != nil {
		return err
	}
	if late, err := st.pollStored(st.route.LoopDeadline, step); !late || err != nil {
		return err
	}
	// Natively the stream stays open; the client resumes from the last event it got.
	st.logger().Info("a live stream of a stored answer ended at the loop deadline", zap.Int("starting_after", d.after))
	if !end {
		return nil
	}
	return st.send(streamedChunk(nil, true))
}

// pollStored calls step every Poll until it reports that the stream it reads is over (or
// fails), the stream's context ends (the client went away) or wait has passed; late reports
// the last.
func (st *streamState) pollStored(wait time.Duration, step func() (over bool, err error)) (late bool, err error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(st.srv.bg.cfg.Poll)
	defer tick.Stop()
	for {
		select {
		case <-st.ctx.Done():
			st.logger().Debug("client left while a stored answer was read", zap.Error(st.ctx.Err()))
			return false, nil
		case <-deadline.C:
			return true, nil
		case <-tick.C:
		}
		if over, err := step(); over || err != nil {
			return false, err
		}
	}
}

// nextAfter returns the sequence number of the last of the events evs, sent after sequence
// number after: the events' own numbering (a count added to after would wrap past the
// largest int), never below after; events without one are counted on from after, up to the
// largest int.
func nextAfter(after int, evs []byte) int {
	body := bytes.TrimSuffix(evs, []byte("\n\n"))
	last := body[bytes.LastIndex(body, []byte("\n\n"))+1:]
	if _, data, ok := bytes.Cut(last, []byte("data: ")); ok {
		if n := gjson.GetBytes(data, "sequence_number"); n.Type == gjson.Number && n.Int() >= 0 && n.Int() > int64(after) {
			return int(n.Int())
		}
	}
	n := bytes.Count(evs, []byte("\n\n"))
	if after > math.MaxInt-n {
		return math.MaxInt
	}
	return after + n
}

// liveCreate answers the body of a background create followed live (see startBackground): the
// request goes upstream as POST path with no body, a path the upstream never issued (the
// response's id is the server's), so that no model runs it; its answer, whatever its status,
// is replaced at its headers.
func liveCreate(path string) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				setHeader(":path", path), setHeader("content-length", "0"),
			}, RemoveHeaders: []string{"content-type", "content-encoding"}},
			BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}},
		}},
	}}
}
