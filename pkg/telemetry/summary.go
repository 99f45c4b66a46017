package telemetry

import "github.com/tidwall/gjson"

// Summary is what the spans and metrics read of one upstream answer.
type Summary struct {
	ID, Model     string
	FinishReasons []string
	// Usage reports whether the answer had a usage object; the counts are zero otherwise.
	Usage                                bool
	InputTokens, OutputTokens            int
	CacheReadTokens, CacheCreationTokens int
	ReasoningTokens                      int
}

// Summarize reads id, model, finish reasons and usage from an answer of any of the three
// surfaces (Responses, Chat Completions, Messages): their fields differ in name, never in
// meaning, so one reader serves them, and no surface package needs to know about telemetry.
func Summarize(body []byte) Summary {
	r := gjson.ParseBytes(body)
	s := Summary{ID: r.Get("id").String(), Model: r.Get("model").String()}
	switch {
	case r.Get("choices").IsArray(): // Chat Completions
		for _, c := range r.Get("choices.#.finish_reason").Array() {
			if c.String() != "" {
				s.FinishReasons = append(s.FinishReasons, c.String())
			}
		}
	case r.Get("stop_reason").Exists(): // Messages
		if v := r.Get("stop_reason").String(); v != "" {
			s.FinishReasons = []string{v}
		}
	default: // Responses: its status is the nearest thing
		if v := r.Get("status").String(); v != "" {
			s.FinishReasons = []string{v}
		}
	}
	u := r.Get("usage")
	if !u.IsObject() {
		return s
	}
	s.Usage = true
	first := func(paths ...string) int {
		for _, p := range paths {
			if v := u.Get(p); v.Exists() {
				return int(v.Int())
			}
		}
		return 0
	}
	s.InputTokens = first("input_tokens", "prompt_tokens")
	s.OutputTokens = first("output_tokens", "completion_tokens")
	s.CacheReadTokens = first("cache_read_input_tokens", "input_tokens_details.cached_tokens", "prompt_tokens_details.cached_tokens")
	s.CacheCreationTokens = first("cache_creation_input_tokens")
	s.ReasoningTokens = first("output_tokens_details.reasoning_tokens", "completion_tokens_details.reasoning_tokens")
	return s
}

// requestModel returns a request body's "model".
func requestModel(body []byte) string {
	if len(body) == 0 {
		return ""
	}
	return gjson.GetBytes(body, "model").String()
}
