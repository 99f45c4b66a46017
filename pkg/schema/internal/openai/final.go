package openai

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Views checks in and returns its rounds' bodies as strings (see View): it fails when there
// are no rounds or no function name, or when a body is not a JSON object.
func Views(in schema.FinalInput) ([]string, error) {
	if len(in.Rounds) == 0 {
		return nil, errors.New("build final answer: no rounds")
	}
	if in.FunctionName == "" {
		return nil, errors.New("build final answer: empty function name")
	}
	views := make([]string, len(in.Rounds))
	for i, r := range in.Rounds {
		views[i] = View(r.Body)
		if !gjson.Valid(views[i]) || !jsonscan.IsObjectText(views[i]) {
			return nil, fmt.Errorf("build final answer: round %d: body is not a JSON object", i+1)
		}
	}
	return views, nil
}

// View returns b as a string without copying it. Final reads the bodies through these
// views only while it runs, never modifies them, and copies every byte it returns.
func View(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// FinalEdit replaces the value at path (a top-level member, or an element of one) of the last
// body.
type FinalEdit struct {
	Path  string
	Value []byte
}

// FinalApply returns a new copy of body (whose view is view) with the value at each edit's path
// replaced, spliced in one pass; the edited values must not nest. A path the body lacks is added
// with sjson.
func FinalApply(body []byte, view string, edits []FinalEdit) ([]byte, error) {
	type span struct {
		start, end int
		value      []byte
	}
	var spans []span
	var missing []FinalEdit
	size := len(body)
	for _, e := range edits {
		r := gjson.Get(view, e.Path)
		if !r.Exists() || r.Index <= 0 {
			missing = append(missing, e)
			continue
		}
		spans = append(spans, span{r.Index, r.Index + len(r.Raw), e.Value})
		size += len(e.Value) - len(r.Raw)
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	out := make([]byte, 0, size)
	at := 0
	for _, sp := range spans {
		out = append(out, body[at:sp.start]...)
		out = append(out, sp.value...)
		at = sp.end
	}
	out = append(out, body[at:]...)
	var err error
	for _, e := range missing {
		if out, err = sjson.SetRawBytes(out, e.Path, e.Value); err != nil {
			return nil, fmt.Errorf("build final answer: set %s: %w", e.Path, err)
		}
	}
	return out, nil
}
