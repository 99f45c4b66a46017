package config

import (
	"time"

	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
)

// The stream modes of a profile (stream_mode).
const (
	// StreamProgressive switches a streaming answer to FULL_DUPLEX_STREAMED and sends each
	// event as it happens.
	StreamProgressive = "progressive"
	// StreamReplay sends a streaming answer once the loop is over.
	StreamReplay = "replay"
)

// LoopDeadlineMargin is the part of a profile's loop_deadline that the server keeps for itself:
// the loop runs for loop_deadline minus this margin, and the rest is for sending the final answer
// before Envoy's message timer, extended to loop_deadline, fires. So a loop_deadline must be
// longer than the margin.
const LoopDeadlineMargin = time.Second

// Profile is a resolved per-route profile: the default profile with a named profile's set fields
// laid over it, in plain Go values.
type Profile struct {
	Name                   string
	Disabled               bool
	FunctionName           string
	FunctionDescription    string
	MaxRounds              int
	LoopDeadline           time.Duration
	RunTimeout             time.Duration
	SessionHeader          string
	IdentityHeader         string
	ForwardHeaders         []string
	Upstream               string
	OutputLimit            int
	AllowAnonymousSessions bool
	// MaxOutputBytes, MaxImages and MaxCallsPerTurn are the profile's output budget.
	MaxOutputBytes  int
	MaxImages       int
	MaxCallsPerTurn int
	// Progressive reports whether a streaming answer is switched to FULL_DUPLEX_STREAMED and
	// sent as it happens (stream_mode "progressive"); KeepAlive is keep_alive_interval.
	Progressive bool
	KeepAlive   time.Duration
	// MaxResponseBytes is Config.max_response_bytes, the bound of one upstream answer.
	MaxResponseBytes int64
	// MaxAnswerBytes is the largest answer body the server can send Envoy: max_request_bytes
	// (the gRPC send limit) less AnswerOverheadBytes for the rest of the ext_proc message.
	MaxAnswerBytes int
}

// AnswerOverheadBytes is the room kept in one ext_proc message for what it carries besides the
// answer body (headers, framing).
const AnswerOverheadBytes = 64 << 10

// Profiles resolves the default profile and every named profile of cfg (defaults applied). The
// default profile has the empty name.
func Profiles(cfg *configv1.Config) map[string]*Profile {
	out := map[string]*Profile{"": resolve("", cfg.DefaultProfile, cfg)}
	for name, p := range cfg.Profiles {
		merged := proto.Clone(cfg.DefaultProfile).(*configv1.Profile)
		if p != nil {
			// Repeated fields replace rather than append.
			if len(p.ForwardHeaders) > 0 {
				merged.ForwardHeaders = nil
			}
			proto.Merge(merged, p)
		}
		out[name] = resolve(name, merged, cfg)
	}
	return out
}

func resolve(name string, p *configv1.Profile, cfg *configv1.Config) *Profile {
	r := &Profile{
		Name:                   name,
		Disabled:               p.GetDisabled(),
		FunctionName:           p.GetFunctionName(),
		FunctionDescription:    p.GetFunctionDescription(),
		MaxRounds:              int(p.GetMaxRounds()),
		LoopDeadline:           p.GetLoopDeadline().AsDuration(),
		RunTimeout:             p.GetRunTimeout().AsDuration(),
		SessionHeader:          p.GetSessionHeader(),
		IdentityHeader:         p.GetIdentityHeader(),
		ForwardHeaders:         append([]string(nil), p.GetForwardHeaders()...),
		Upstream:               p.GetUpstream(),
		OutputLimit:            int(p.GetOutputLimitBytes()),
		AllowAnonymousSessions: p.GetAllowAnonymousSessions(),
		MaxOutputBytes:         int(p.GetMaxOutputBytes()),
		MaxImages:              int(p.GetMaxImages()),
		MaxCallsPerTurn:        int(p.GetMaxCallsPerTurn()),
		Progressive:            p.GetStreamMode() != StreamReplay,
		KeepAlive:              p.GetKeepAliveInterval().AsDuration(),
		MaxResponseBytes:       int64(cfg.GetMaxResponseBytes()),
		MaxAnswerBytes:         int(cfg.GetMaxRequestBytes()) - AnswerOverheadBytes,
	}
	if r.Upstream == "" {
		r.Upstream = cfg.GetUpstream()
	}
	return r
}
