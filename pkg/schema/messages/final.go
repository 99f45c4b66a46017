package messages

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Round is one model answer of the loop and the results of its code calls.
type Round struct {
	// Body is the model's answer.
	Body []byte
	// Results are the results of the round's code calls by tool_use id; a call without one
	// (not run) is left out of the answer.
	Results map[string]Result
}

// Container is the container the answer names.
type Container struct {
	ID        string
	ExpiresAt time.Time
	// Skills are its skills with their resolved versions (container.skills).
	Skills []Skill
}

// FinalInput is what [Final] assembles the answer from.
type FinalInput struct {
	// Request is what Rewrite learned of the client's request.
	Request Request
	// Rounds are the loop's rounds, in order; the last one's answer is the base of the
	// client's (its id, model, stop_reason).
	Rounds []Round
	// Container, if set, is the container the code ran in.
	Container *Container
	// Paused makes the answer's stop_reason "pause_turn" (unless a run is paused on the
	// client's tools, which makes it "tool_use"): the loop stopped at its round limit
	// or deadline before the model was done, and the client may send the answer back to go on,
	// as with the native tool.
	Paused bool
	// Resumed reports that the first round is a resumed cell's (schema.Resume.Turn): its
	// server_tool_use is in an earlier answer, and this one shows only the cell's result, or
	// the calls it paused on again.
	Resumed bool
}

// Final assembles the client's answer: the rounds' content blocks in order, each call of a
// code tool shown as the native server_tool_use block followed by its result block, the
// client's own tool calls and text as the model wrote them; usage summed over the rounds,
// with the number of code runs; the top-level container.
func Final(in FinalInput) ([]byte, error) {
	if len(in.Rounds) == 0 {
		return nil, errors.New("final: no rounds")
	}
	var blocks []string
	var in1, out1, cacheW, cacheR int64
	runs := 0
	toolCalls := false // a run is paused on the client's tools
	for i, rd := range in.Rounds {
		msg := gjson.ParseBytes(rd.Body)
		if !msg.IsObject() {
			return nil, fmt.Errorf("final: round %d: the answer is not a JSON object", i+1)
		}
		u := msg.Get("usage")
		in1 += u.Get("input_tokens").Int()
		out1 += u.Get("output_tokens").Int()
		cacheW += u.Get("cache_creation_input_tokens").Int()
		cacheR += u.Get("cache_read_input_tokens").Int()
		for _, b := range msg.Get("content").Array() {
			if b.Get("type").String() != "tool_use" {
				blocks = append(blocks, b.Raw)
				continue
			}
			k := in.Request.Names.kindOf(b.Get("name").String(), in.Request.Version)
			if k == 0 {
				blocks = append(blocks, in.Request.clientBlock(b)) // the client's own tool
				continue
			}
			id := b.Get("id").String()
			res, ran := rd.Results[id]
			if !ran {
				continue
			}
			if !res.NotRun {
				runs++
			}
			if !(in.Resumed && i == 0) {
				blocks = append(blocks, serverToolUse(b, k))
			}
			if len(res.ToolCalls) > 0 {
				blocks = append(blocks, in.Request.codeToolUses(ServerToolUseID(id), res.ToolCalls)...)
				toolCalls = true
				continue
			}
			blocks = append(blocks, res.Block(ServerToolUseID(id)))
		}
	}
	last := in.Rounds[len(in.Rounds)-1].Body
	out, err := sjson.SetRawBytes(last, "content", []byte("["+strings.Join(blocks, ",")+"]"))
	if err != nil {
		return nil, fmt.Errorf("final: set content: %w", err)
	}
	usage := gjson.GetBytes(last, "usage")
	u := usage.Raw
	if !usage.IsObject() {
		u = "{}"
	}
	for _, f := range []struct {
		key string
		v   int64
	}{{"input_tokens", in1}, {"output_tokens", out1}, {"cache_creation_input_tokens", cacheW}, {"cache_read_input_tokens", cacheR}} {
		if f.v == 0 && !gjson.Get(u, f.key).Exists() {
			continue
		}
		if u, err = sjson.Set(u, f.key, f.v); err != nil {
			return nil, fmt.Errorf("final: usage: %w", err)
		}
	}
	if u, err = sjson.SetRaw(u, "server_tool_use", `{"web_search_requests":0,"web_fetch_requests":0,"code_execution_requests":`+itoa(runs)+`}`); err != nil {
		return nil, fmt.Errorf("final: usage: %w", err)
	}
	if out, err = sjson.SetRawBytes(out, "usage", []byte(u)); err != nil {
		return nil, fmt.Errorf("final: set usage: %w", err)
	}
	if c := in.Container; c != nil && !(in.Resumed && !toolCalls) {
		// A resumed cell's final answer (the cell ended, the model answered) has no container
		// natively (the reference's recorded exchange); its pauses do.
		if out, err = sjson.SetRawBytes(out, "container", []byte(containerJSON(c))); err != nil {
			return nil, fmt.Errorf("final: set container: %w", err)
		}
	}
	stop := ""
	switch {
	case toolCalls:
		stop = "tool_use"
	case in.Paused:
		stop = "pause_turn"
	}
	if stop != "" {
		if out, err = sjson.SetBytes(out, "stop_reason", stop); err != nil {
			return nil, fmt.Errorf("final: set stop_reason: %w", err)
		}
	}
	return out, nil
}

func containerJSON(c *Container) string {
	if len(c.Skills) == 0 {
		// Natively a container without skills is {id, expires_at} (the reference's recorded
		// exchange); the SDKs take skills as optional.
		return `{"id":` + quote(c.ID) + `,"expires_at":` + quote(c.ExpiresAt.UTC().Format(time.RFC3339)) + `}`
	}
	return `{"id":` + quote(c.ID) + `,"expires_at":` + quote(c.ExpiresAt.UTC().Format(time.RFC3339)) + `,"skills":` + skillsJSON(c.Skills) + `}`
}

// ServerToolUseID is the id the client sees for a call the model made with id: a
// "srvtoolu_" id with the same tail, so that a replayed history maps back to the same call.
func ServerToolUseID(id string) string {
	if strings.HasPrefix(id, "srvtoolu_") {
		// Already the client's: a resumed cell's call (schema.Resume.Turn) has its history's id.
		return id
	}
	return "srvtoolu_" + strings.TrimPrefix(id, "toolu_")
}
