package responses

import (
	"crypto/rand"
	"fmt"
	"io"
	"slices"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// Surface is the Responses API. Its zero value is ready to use.
type Surface struct{}

var (
	_ schema.Surface      = Surface{}
	_ schema.Continuation = (*exchange)(nil)
)

// Name implements [schema.Surface].
func (Surface) Name() string { return "responses" }

// Paths implements [schema.Surface].
func (Surface) Paths() []string { return []string{"/v1/responses"} }

// ErrorBody implements [schema.Surface]: OpenAI's error shape.
func (Surface) ErrorBody(e *schema.RequestError) []byte { return openai.ErrorBody(e) }

// NewExchange implements [schema.Surface]. A request with the hosted shell tool (container_auto
// or container_reference) is served too, with or without a code_interpreter tool: see shell.go.
func (Surface) NewExchange(body []byte, o schema.Options) (schema.Exchange, error) {
	if bare, ok := withoutBackground(body); ok {
		// background: true with the hosted tool runs detached (see background.go): the
		// upstream gets the rounds without it. Without the tool the request passes untouched.
		x, err := newExchange(bare, body, o)
		if err != nil || !x.Request().Found {
			return newExchange(body, body, o)
		}
		x.background = true
		return x, nil
	}
	return newExchange(body, body, o)
}

// newExchange is NewExchange of body, which the client sent as clientBody.
func newExchange(body, clientBody []byte, o schema.Options) (*exchange, error) {
	body, sh, err := rewriteShell(body)
	if err != nil {
		return nil, err
	}
	d := &dialect
	if sh != nil {
		d = &shellDialect
		if !sh.codeTool {
			o.FunctionName = noCodeFunction
		}
	}
	x, err := d.NewExchange(body, o)
	if err != nil {
		return nil, err
	}
	ex := &exchange{Exchange: x, clientBody: clientBody}
	if sh != nil {
		if err := sh.apply(x.Request()); err != nil {
			return nil, err
		}
		ex.shell = &shellFinal{tool: sh.tool, key: make([]byte, 16)}
		_, _ = rand.Read(ex.shell.key) // crypto/rand.Read never fails
	}
	return ex, nil
}

// The kinds of [store.Key] a Responses request continues from.
const (
	kindResponse     = "responses.response"     // an answer's id
	kindConversation = "responses.conversation" // a conversation's id
)

// exchange is one Responses request.
type exchange struct {
	*openai.Exchange
	// carried reports that the request carries its conversation's pending calls: they are
	// forgotten once the upstream has taken it, since the conversation holds them from then on.
	carried bool
	// named and upstreamID are, for a streamed answer of several turns, the id the client was
	// given (the first turn's: the stream names its response before the last turn exists)
	// and the upstream's id of the last turn, which a continuation must carry upstream.
	named, upstreamID string
	// clientPrevious is the previous_response_id the client sent when Continue replaced it by
	// the upstream's: the answer echoes the client's.
	clientPrevious string
	// ran are the containers the answer's calls ran in, in order, as Final last saw them.
	ran []string
	// rounds are the rounds Final last built the answer of: Remember keeps their code calls
	// for the requests that reference them by id.
	rounds []schema.Round
	// live is what the event stream learned as the rounds streamed.
	live liveCalls
	// shell is set when the request has the hosted shell tool; shellCalls then holds the
	// actions of the shell calls of the answer last parsed, by call id.
	shell      *shellFinal
	shellCalls map[string]shellCallArgs
	// clientBody is the body as the client sent it, whose input items Keep stores.
	clientBody []byte
	// background reports that the client asked for a background response (the body sent
	// upstream has no "background"); bg is its record once begun (see background.go).
	background bool
	bg         *bgRun
}

// Continue implements [schema.Continuation]. The upstream, when it stores responses, holds a turn
// whose internal calls the client never saw unanswered; a request that continues from that
// answer by previous_response_id, or in the same conversation, carries only the client's
// outputs, and gets ours prepended, or the upstream would refuse it. Clients that replay the
// items themselves need nothing. An answer's entry stays until it expires (a client may branch
// from one answer several times, or retry).
func (x *exchange) Continue(p store.Continuations, identity func() string) (bool, error) {
	r := x.Request()
	expanded := false
	if r.Found && p.Holds(kindItem) {
		var err error
		if expanded, err = x.expandItemRefs(p, identity()); err != nil {
			return false, err
		}
	}
	if r.PreviousResponseID == "" && r.ConversationID == "" {
		return expanded, nil
	}
	changed, err := x.continueFrom(p, identity())
	return expanded || changed, err
}

// expandItemRefs replaces the request's references to code calls this server minted by the
// calls the model saw (see [expandItemRefs]); an auto container reuses their containers as it
// does those of replayed items.
func (x *exchange) expandItemRefs(p store.Continuations, identity string) (bool, error) {
	r := x.Request()
	t, err := openai.TopKeys.TopObject(r.Body, "expand item references")
	if err != nil {
		return false, err
	}
	out, containers, changed, err := expandItemRefs(r.Body, t.Span("input"), x.FunctionName(), p, identity)
	if err != nil || !changed {
		return false, err
	}
	if grown := len(out) - len(r.Body); grown > store.MaxContinuationBytes {
		return false, fmt.Errorf("expand item references: %w (%d bytes)", schema.ErrRewriteTooLarge, grown)
	}
	x.SetBody(out)
	r.ReplayedContainerIDs = append(r.ReplayedContainerIDs, containers...)
	return true, nil
}

// continueFrom is Continue for a request that continues from an answer (previous_response_id)
// or a conversation.
func (x *exchange) continueFrom(p store.Continuations, id string) (bool, error) {
	r := x.Request()
	if r.Found {
		// The containers of the answers it continues from: an auto container reuses them.
		if r.PreviousResponseID != "" {
			r.ContextContainerIDs = p.Containers(id, store.Key{Kind: kindResponse, ID: r.PreviousResponseID})
		}
		if r.ContextContainerIDs == nil && r.ConversationID != "" {
			r.ContextContainerIDs = p.Containers(id, store.Key{Kind: kindConversation, ID: r.ConversationID})
		}
	}
	var calls []store.PendingCall
	if r.PreviousResponseID != "" {
		calls = p.Get(id, store.Key{Kind: kindResponse, ID: r.PreviousResponseID})
	}
	conversation := false
	if calls == nil && r.ConversationID != "" {
		calls = p.Get(id, store.Key{Kind: kindConversation, ID: r.ConversationID})
		conversation = calls != nil
	}
	changed := false
	if calls != nil {
		out, err := prependCallOutputs(r.Body, calls)
		if err != nil {
			return false, err
		}
		if grown := len(out) - len(r.Body); grown > store.MaxContinuationBytes {
			return false, fmt.Errorf("prepend call outputs: %w (%d bytes)", schema.ErrRewriteTooLarge, grown)
		}
		x.SetBody(out)
		x.carried, changed = conversation, true
	}
	if r.PreviousResponseID == "" {
		return changed, nil
	}
	to := p.Alias(id, r.PreviousResponseID)
	if to == "" {
		return changed, nil
	}
	out, err := setPrevious(r.Body, to)
	if err != nil {
		return changed, err
	}
	x.SetBody(out)
	x.clientPrevious, r.PreviousResponseID = r.PreviousResponseID, to
	return true, nil
}

// setPrevious returns body with its previous_response_id set to id.
func setPrevious(body []byte, id string) ([]byte, error) {
	sc, err := jsonscan.Scan(body, &openai.RequestSpec, nil)
	if err != nil || !sc.IsObject {
		return nil, fmt.Errorf("set previous_response_id: the request is not a JSON object (%v)", err)
	}
	k := openai.TopKeys.Index(body, sc.Members).Find("previous_response_id")
	if k < 0 {
		return nil, fmt.Errorf("set previous_response_id: the request has none")
	}
	m := sc.Members[k]
	return jsonscan.Apply(body, []jsonscan.Edit{{Start: m.ValStart, End: m.ValEnd, Repl: jsonscan.AppendString(nil, id)}})
}

// Accepted implements [schema.Continuation].
func (x *exchange) Accepted(p store.Continuations, identity string) {
	if x.carried {
		p.Drop(identity, store.Key{Kind: kindConversation, ID: x.Request().ConversationID})
	}
}

// Remember implements [schema.Continuation]: the calls are kept for the requests that continue
// from the answer's id, and from the request's conversation; so are the containers the calls
// ran in (with those of the answers the request continued from), which an auto container of
// such a request reuses.
func (x *exchange) Remember(p store.Continuations, identity string, final []byte, pending []store.PendingCall) {
	rememberItems(p, identity, x.rounds)
	x.rememberShellItems(p, identity)
	if len(pending) > 0 && x.shell != nil {
		// The shell calls' outputs as the model reads them, not as their programs printed them.
		outs := make([]schema.CallOutput, len(pending))
		for i, c := range pending {
			outs[i] = schema.CallOutput{CallID: c.CallID, Output: c.Output}
		}
		pending = slices.Clone(pending)
		for i, o := range x.shellOutputs(outs) {
			pending[i].Output = o.Output
		}
	}
	if len(pending) > 0 {
		p.Put(identity, pending,
			store.Key{Kind: kindResponse, ID: gjson.GetBytes(final, "id").String()},
			store.Key{Kind: kindConversation, ID: x.Request().ConversationID})
	}
	if x.named != "" {
		p.PutAlias(identity, x.named, x.upstreamID)
	}
	if ids := append(slices.Clone(x.Request().ContextContainerIDs), x.ran...); len(ids) > 0 {
		p.PutContainers(identity, ids,
			store.Key{Kind: kindResponse, ID: gjson.GetBytes(final, "id").String()},
			store.Key{Kind: kindConversation, ID: x.Request().ConversationID})
	}
}

// ContainersRan implements admission.ContainersRan: the containers the answer's calls ran in,
// as Final last saw them.
func (x *exchange) ContainersRan() []string { return x.ran }

// Final implements [schema.Exchange].
func (x *exchange) Final(rounds []schema.Round, incomplete string) ([]byte, error) {
	r := x.Request()
	x.ran = x.ran[:0]
	x.rounds = rounds
	for _, rd := range rounds {
		for _, c := range rd.Calls {
			if c.ContainerID != "" && (len(x.ran) == 0 || x.ran[len(x.ran)-1] != c.ContainerID) {
				x.ran = append(x.ran, c.ContainerID)
			}
		}
	}
	in := schema.FinalInput{Rounds: rounds, FunctionName: x.FunctionName(), Tool: r.Tool, ToolChoice: r.ToolChoice,
		NullOutputs: !r.IncludeOutputs}
	views, err := openai.Views(in)
	var body []byte
	if err == nil {
		body, err = finalResponses(in, views, x.shell)
	}
	if err == nil && incomplete != "" {
		body, err = markIncomplete(body, incomplete)
	}
	if err == nil && x.clientPrevious != "" {
		body, err = sjson.SetBytes(body, "previous_response_id", x.clientPrevious)
	}
	if err == nil && r.Stream && (len(rounds) > 1 || x.live.named != "") {
		// A stream named its response with the first turn's id (response.created, the
		// upstream's own when the first turn streamed): the answer keeps that name, and a
		// continuation from it is sent upstream as one from the last turn (see Remember and
		// Continue).
		first, last := gjson.GetBytes(rounds[0].Body, "id").String(), gjson.GetBytes(body, "id").String()
		if x.live.named != "" {
			first = x.live.named
		}
		if first != "" && last != "" && first != last {
			if body, err = sjson.SetBytes(body, "id", first); err == nil {
				x.named, x.upstreamID = first, last
			}
		}
	}
	if err == nil && x.bg != nil {
		body, err = x.backgroundFinal(body, rounds)
	}
	return body, err
}

// Events implements [schema.Exchange]: the answer is written to w as the Responses event
// stream, each event as it happens (see events).
func (x *exchange) Events(w io.Writer) schema.Sink { return &events{x: x, w: w} }
