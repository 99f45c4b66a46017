package openai

import (
	"errors"
	"fmt"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
)

// Exchange is the part of a request's [schema.Exchange] that OpenAI's surfaces share: the
// rewrite, the turns and the follow-ups. It keeps the top-level members of the last request
// sent and of the last answer read, so that no round scans again what an earlier step read or
// built. A surface's exchange embeds it and adds its continuations, final answer and events.
type Exchange struct {
	d    *Dialect
	req  schema.Request
	name string
	// sent is the last request sent upstream, sentMembers its top-level members (nil when it
	// must be scanned).
	sent        []byte
	sentMembers []jsonscan.Member
	// answer is the last answer read, turn its calls.
	answer jsonscan.TopLevel
	turn   schema.Turn
	parsed bool
}

// NewExchange rewrites body (see RewriteRequest) and returns the request's exchange.
func (d *Dialect) NewExchange(body []byte, o schema.Options) (*Exchange, error) {
	r, members, err := d.rewrite(body, o)
	if err != nil {
		return nil, err
	}
	return &Exchange{d: d, req: r, name: o.Name(), sent: r.Body, sentMembers: members}, nil
}

// Request implements [schema.Exchange].
func (x *Exchange) Request() *schema.Request { return &x.req }

// FunctionName is the name of the function the hosted tool became.
func (x *Exchange) FunctionName() string { return x.name }

// SetBody replaces the body to send upstream first (a continuation put calls back into it).
func (x *Exchange) SetBody(b []byte) {
	x.req.Body, x.sent, x.sentMembers = b, b, nil
}

// Turn returns the calls of the last answer ParseTurn read.
func (x *Exchange) Turn() schema.Turn { return x.turn }

// ParseTurn implements [schema.Exchange].
func (x *Exchange) ParseTurn(body []byte) (schema.Turn, error) {
	turn, t, err := x.d.ParseTurn(body, x.name)
	if err != nil {
		return schema.Turn{}, err
	}
	x.answer, x.turn, x.parsed = t, turn, true
	return turn, nil
}

// FollowUp implements [schema.Exchange]: see [Dialect.FollowUp] for what it builds.
func (x *Exchange) FollowUp(outputs []schema.CallOutput, o schema.FollowUpOptions) ([]byte, error) {
	if !x.parsed {
		return nil, errors.New("follow up: no answer has been read")
	}
	if x.sentMembers == nil {
		sc, err := jsonscan.Scan(x.sent, &RequestSpec, nil)
		if err != nil {
			return nil, fmt.Errorf("follow up: parse request: %w", err)
		}
		if !sc.IsObject {
			return nil, errors.New("follow up: the request is not a JSON object")
		}
		x.sentMembers = sc.Members
	}
	o.FunctionName = x.name
	body, members, err := x.d.followUp(TopKeys.Index(x.sent, x.sentMembers), x.answer, x.turn, outputs, o)
	if err != nil {
		return nil, err
	}
	x.sent, x.sentMembers = body, members
	return body, nil
}

// ErrorBody implements [schema.Exchange].
func (x *Exchange) ErrorBody(e *schema.RequestError) []byte { return ErrorBody(e) }

// UpstreamErrorBody implements [schema.Exchange].
func (x *Exchange) UpstreamErrorBody(status int, body []byte) []byte {
	return UpstreamErrorBody(status, body)
}
