package responses

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// kindStored is the kind of [store.Key] under which the assembled answer of a request this
// server looped is kept, by the answer's id, for GET /v1/responses/{id} and its input_items
// (issue 24: the upstream knows only its raw rounds). The entry is one [store.PendingCall]:
// CallID is the answer's id, Arguments the answer's JSON as the client got it, Output the
// request's input items (a JSON array). An entry whose Arguments is empty is a deletion: the
// id then answers 404, as natively, instead of reaching the upstream's raw round.
const kindStored = "responses.stored"

// storedInput returns the input items of the client's request body for a stored answer, as a
// JSON array, or nil when the request asked not to be stored ("store": false) or its input
// cannot be listed.
func storedInput(body []byte) []byte {
	if s := gjson.GetBytes(body, "store"); s.Exists() && s.Type == gjson.False {
		return nil
	}
	in := gjson.GetBytes(body, "input")
	var items []json.RawMessage
	switch {
	case in.Type == gjson.String:
		b, err := json.Marshal(map[string]any{
			"id": newItemID("msg_"), "type": "message", "role": "user", "status": "completed",
			"content": []map[string]string{{"type": "input_text", "text": in.String()}},
		})
		if err != nil {
			return nil
		}
		items = append(items, b)
	case in.IsArray():
		for _, it := range in.Array() {
			raw := json.RawMessage(it.Raw)
			if it.IsObject() && !it.Get("id").Exists() {
				// The native list names every item; a message the client sent without an id
				// gets one here, as the upstream would give it.
				prefix := "msg_"
				if t := it.Get("type").String(); t != "" && t != "message" {
					prefix = "item_"
				}
				var m map[string]json.RawMessage
				if err := json.Unmarshal(raw, &m); err != nil {
					return nil
				}
				id, _ := json.Marshal(newItemID(prefix))
				m["id"] = id
				b, err := json.Marshal(m)
				if err != nil {
					return nil
				}
				raw = b
			}
			items = append(items, raw)
		}
	default:
		items = []json.RawMessage{}
	}
	b, err := json.Marshal(items)
	if err != nil {
		return nil
	}
	return b
}

// newItemID returns a new item id with prefix.
func newItemID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return prefix + hex.EncodeToString(b)
}

// Keep stores the answer final of a request this server looped, with its input items, for
// identity, for GET /v1/responses/{id} (nothing is kept for the identity "", nor when the
// request asked for store: false). It implements admission's Keeper.
//
// A background response's record is its run's to write (EndBackground), fenced by its lease:
// Keep leaves it alone.
func (x *exchange) Keep(p store.Pending, identity string, final []byte) {
	if p == nil || identity == "" || x.bg != nil {
		return
	}
	id := gjson.GetBytes(final, "id").String()
	input := storedInput(x.clientBody)
	if id == "" || input == nil {
		return
	}
	p.Put(identity, []store.PendingCall{{CallID: id, Arguments: string(final), Output: string(input)}},
		store.Key{Kind: kindStored, ID: id})
}

// ServeStored answers, for an answer this server kept for the caller, GET
// /v1/responses/{id} (JSON, or with stream=true — in the query, as the Python SDK sends it, or
// "stream": true in a JSON body, as openai-go does — the native event stream rebuilt from it,
// after starting_after when given), DELETE /v1/responses/{id} and GET
// /v1/responses/{id}/input_items as the native API does: rest is the path after the surface's
// path ("/{id}…"), query the raw query string. The answer's content type is JSON unless
// stream is set. It reports false for anything else (an id it never kept, another caller's,
// another path), which then goes to the upstream untouched. identity is called only when
// the store may hold an answer.
//
// A background response's record (see background.go) is served the same way, and POST
// /v1/responses/{id}/cancel cancels it. Its stream is the events recorded as they were
// produced; live reports that the response is still running and the events answered do not
// end the stream: asked again later, the stream has more events (the caller may wait and ask
// again).
func (Surface) ServeStored(p store.Pending, identity func() string, method, rest, query string, body []byte) (status int, answer []byte, stream, live, ok bool) {
	if p == nil || !p.Holds(kindStored) {
		return 0, nil, false, false, false
	}
	rest, ok = strings.CutPrefix(rest, "/")
	if !ok {
		return 0, nil, false, false, false
	}
	id, sub, _ := strings.Cut(rest, "/")
	switch {
	case id == "":
		return 0, nil, false, false, false
	case sub == "" && (method == http.MethodGet || method == http.MethodDelete):
	case sub == "input_items" && method == http.MethodGet:
	case sub == "cancel" && method == http.MethodPost:
	default:
		return 0, nil, false, false, false
	}
	who := identity()
	if who == "" {
		return 0, nil, false, false, false
	}
	key := store.Key{Kind: kindStored, ID: id}
	calls := p.Get(who, key)
	if len(calls) != 1 || calls[0].CallID != id {
		return 0, nil, false, false, false
	}
	e := expireLease(p, who, id, calls[0], time.Now())
	if e.Arguments == "" {
		return http.StatusNotFound, notFound(id), false, false, true
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return http.StatusBadRequest, openai.ErrorJSON("Invalid query string.", "invalid_request_error", "", ""), false, false, true
	}
	if sub == "cancel" {
		if gjson.Get(e.Arguments, "background").Type != gjson.True {
			// The upstream holds the raw round of the same id, not a background one: it
			// answers as natively.
			return 0, nil, false, false, false
		}
		st, b := serveCancel(p, who, id, e)
		return st, b, false, false, true
	}
	status, answer, stream = serveStoredAnswer(p, who, method, id, sub, q, body, e)
	// A stream that ends with its terminal event is over, whatever the record says: the run
	// recorded its end and is writing its record (a reader then stops at that event).
	live = stream && backgroundLive(gjson.Get(e.Arguments, "status").String()) && !endsStream(answer)
	return status, answer, stream, live, true
}

// serveStoredAnswer answers GET (JSON, the stream, input_items) and DELETE of the answer e
// kept for who under id.
func serveStoredAnswer(p store.Pending, who, method, id, sub string, q url.Values, body []byte, e store.PendingCall) (int, []byte, bool) {
	key := store.Key{Kind: kindStored, ID: id}
	switch {
	case method == http.MethodDelete:
		if gjson.Get(e.Arguments, "background").Type == gjson.True && backgroundLive(gjson.Get(e.Arguments, "status").String()) {
			// A background response still running is stopped too (the replica running it
			// reads the flag); its later writes leave the tombstone as it is (bgRun.saveLocked).
			p.Put(who, []store.PendingCall{{CallID: id}}, store.Key{Kind: kindBackgroundCancel, ID: id})
		}
		// A tombstone, not a Drop: the id now 404s here, and does not reach the upstream,
		// which still holds the raw round of the same id.
		p.Put(who, []store.PendingCall{{CallID: id}}, key)
		b, _ := json.Marshal(struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Deleted bool   `json:"deleted"`
		}{id, "response.deleted", true})
		return http.StatusOK, b, false
	case sub == "input_items":
		st, b := inputItems([]byte(e.Output), q)
		return st, b, false
	case q.Get("stream") == "true" || len(body) > 0 && gjson.GetBytes(body, "stream").Type == gjson.True:
		after, bad := startingAfter(q.Get("starting_after"))
		if bad != nil {
			return http.StatusBadRequest, bad, false
		}
		if evs, ok := backgroundEvents(p, who, id, after); ok {
			return http.StatusOK, evs, true
		}
		st, b := replay([]byte(e.Arguments), after)
		return st, b, st == http.StatusOK
	default:
		return http.StatusOK, []byte(e.Arguments), false
	}
}

// startingAfter reads the starting_after of a stream's retrieval: -1 when it is not given,
// or the body of the native 400 when it is not a non-negative integer.
func startingAfter(s string) (int, []byte) {
	if s == "" {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, openai.ErrorJSON(fmt.Sprintf("Invalid 'starting_after': '%s'. Expected a non-negative integer.", s),
			"invalid_request_error", "starting_after", "invalid_value")
	}
	return n, nil
}

// notFound is the native answer to an id the caller has no response of.
func notFound(id string) []byte {
	return openai.ErrorJSON(fmt.Sprintf("Response with id '%s' not found.", id), "invalid_request_error", "", "")
}

// inputItems lists the stored input items as GET /v1/responses/{id}/input_items does: order
// (asc or desc, the default), after (an item id: the items after it in that order) and limit
// (1 to 100, 20 by default).
func inputItems(stored []byte, q url.Values) (int, []byte) {
	bad := func(param, msg string) (int, []byte) {
		return http.StatusBadRequest, openai.ErrorJSON(msg, "invalid_request_error", param, "invalid_value")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(stored, &items); err != nil {
		return http.StatusInternalServerError, openai.ServerErrorBody(http.StatusInternalServerError, "codeinterp could not read the stored input items.", "")
	}
	order := q.Get("order")
	switch order {
	case "", "desc":
		for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
			items[i], items[j] = items[j], items[i]
		}
	case "asc":
	default:
		return bad("order", fmt.Sprintf("Invalid value for 'order': '%s'. Expected one of 'asc', 'desc'.", order))
	}
	limit := 20
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return bad("limit", fmt.Sprintf("Invalid 'limit': '%s'. Expected an integer between 1 and 100.", s))
		}
		limit = n
	}
	if after := q.Get("after"); after != "" {
		i := 0
		for i < len(items) && gjson.GetBytes(items[i], "id").String() != after {
			i++
		}
		if i == len(items) {
			return bad("after", fmt.Sprintf("Item with id '%s' not found.", after))
		}
		items = items[i+1:]
	}
	more := len(items) > limit
	if more {
		items = items[:limit]
	}
	list := struct {
		Object  string            `json:"object"`
		Data    []json.RawMessage `json:"data"`
		FirstID *string           `json:"first_id"`
		LastID  *string           `json:"last_id"`
		HasMore bool              `json:"has_more"`
	}{Object: "list", Data: items, HasMore: more}
	if list.Data == nil {
		list.Data = []json.RawMessage{}
	}
	if len(items) > 0 {
		first, last := gjson.GetBytes(items[0], "id").String(), gjson.GetBytes(items[len(items)-1], "id").String()
		list.FirstID, list.LastID = &first, &last
	}
	b, err := json.Marshal(list)
	if err != nil {
		return http.StatusInternalServerError, openai.ServerErrorBody(http.StatusInternalServerError, "codeinterp could not list the input items.", "")
	}
	return http.StatusOK, b
}

// replay returns the event stream of the stored answer final, rebuilt as [SSE] builds it
// (the events numbered from 0, as the stream the client got), with only the events after
// sequence number after when it is not -1.
func replay(final []byte, after int) (int, []byte) {
	b, err := SSE(final)
	if err != nil {
		return http.StatusInternalServerError, openai.ServerErrorBody(http.StatusInternalServerError, "codeinterp could not replay the stored response.", "")
	}
	if after < 0 {
		return http.StatusOK, b
	}
	// Each event is "event: <type>\ndata: <json>\n\n", numbered from 0 in order: the events
	// after the after-th are those from the (after+1)-th on.
	rest := b
	for range after + 1 {
		i := bytes.Index(rest, []byte("\n\n"))
		if i < 0 {
			return http.StatusOK, nil
		}
		rest = rest[i+2:]
	}
	return http.StatusOK, rest
}
