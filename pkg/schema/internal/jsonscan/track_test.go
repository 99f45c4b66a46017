package jsonscan

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTrack edits objects the ways the rewrite and the follow-ups do (a value replaced, a value
// grown inside, a member removed, members appended) and checks the tracked members against a
// scan of the result.
func TestTrack(t *testing.T) {
	bodies := []string{
		`{"a":1,"b":[1,2],"c":"x","d":{"e":true}}`,
		`{ "a" : 1 , "b" : [ 1 ] , "c" : "x" }`,
		`{"only":[]}`,
		`{"a":[{"x":1}],"tool_choice":"required","z":null}`,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, body := range bodies {
		b := []byte(body)
		members, _, err := ScanTop(b)
		require.NoError(t, err)
		for range 200 {
			var edits []Edit
			removed := -1
			for k, m := range members {
				switch rng.IntN(4) {
				case 0:
					edits = append(edits, Edit{Start: m.ValStart, End: m.ValEnd, Repl: []byte(`{"new":"value"}`)})
				case 1:
					if b[m.ValStart] == '[' {
						edits = append(edits, AppendElems(b, m.ValEnd-1, []byte(`"more",2`)))
					}
				case 2:
					if removed < 0 && len(members) > 1 {
						removed = k
					}
				}
			}
			if removed >= 0 {
				rm := RemoveMember(members, removed)
				// The removal must not overlap another edit of the same run.
				keep := edits[:0]
				for _, e := range edits {
					if e.End <= rm.Start || e.Start >= rm.End {
						keep = append(keep, e)
					}
				}
				edits = append(keep, rm)
			}
			out, err := Apply(b, edits)
			require.NoError(t, err)
			tracked := Track(members, edits)
			want, _, err := ScanTop(out)
			require.NoError(t, err, "%s", out)
			require.Equal(t, want, tracked, "%s -> %s", b, out)

			if rng.IntN(2) == 0 {
				closeAt := CloseAt(out)
				adds := []Edit{AppendMember(out, closeAt, "tool_choice", []byte(`"none"`))}
				second := AppendMember(out, closeAt, "input", []byte(`[1]`))
				if second.Repl[0] != ',' {
					second.Repl = append([]byte{','}, second.Repl...)
				}
				adds = append(adds, second)
				final, err := Apply(out, adds)
				require.NoError(t, err)
				got := Appended(final, Track(tracked, adds), adds)
				want, _, err := ScanTop(final)
				require.NoError(t, err, "%s", final)
				assert.Equal(t, want, got, "%s -> %s", out, final)
			}
		}
	}
}
