package responses

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// ReadStream implements [schema.StreamReader]: a Responses event stream is read up to its
// response.completed (response.incomplete, response.failed), whose response is the answer.
func (x *exchange) ReadStream() schema.UpstreamStream { return &upstreamStream{} }

var _ schema.StreamReader = (*exchange)(nil)

// upstreamStream reads one Responses event stream from the upstream. response.created (whose
// response starts the client's stream when the first answer streams) and the events about
// output items (response.output_item.*, response.content_part.*, response.output_text.* and
// the other events that carry an output_index) are passed on as deltas, as the upstream sent
// them; the events sink decides which of them the client sees (see events.delta).
type upstreamStream struct {
	ended bool
}

// Event implements [schema.UpstreamStream].
func (u *upstreamStream) Event(_ string, data []byte) (delta, answer []byte, err error) {
	if u.ended {
		return nil, nil, errors.New("read responses stream: an event after the response ended")
	}
	if !gjson.ValidBytes(data) {
		return nil, nil, errors.New("read responses stream: an event is not JSON")
	}
	ev := gjson.ParseBytes(data)
	if !ev.IsObject() {
		return nil, nil, errors.New("read responses stream: an event is not a JSON object")
	}
	switch typ := ev.Get("type").String(); {
	case typ == "response.completed", typ == "response.incomplete", typ == "response.failed":
		r := ev.Get("response")
		if !r.IsObject() {
			return nil, nil, fmt.Errorf("read responses stream: %s has no response", typ)
		}
		u.ended = true
		return nil, []byte(r.Raw), nil
	case typ == "error":
		return nil, nil, fmt.Errorf("read responses stream: the upstream reported an error (%s)", ev.Get("code").String())
	case typ == "response.created", strings.HasPrefix(typ, "response.") && ev.Get("output_index").Type == gjson.Number:
		return data, nil, nil
	}
	return nil, nil, nil
}
