package local

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeAnswer(t *testing.T) {
	tests := []struct {
		name    string
		give    map[string]any
		want    any
		wantErr string
	}{
		{name: "ready", give: map[string]any{"op": "ready", "preloaded": []any{"numpy"}}, want: readyAnswer{preloaded: []any{"numpy"}}},
		{name: "a result with cut texts",
			give: map[string]any{"op": "result", "seq": int64(3), "value": []any{"v", int64(5)}, "truncated": true,
				"error":  map[string]any{"name": []any{"E", int64(0)}, "value": "plain", "traceback": []any{"tb"}},
				"images": []any{[]byte("png"), "not an image", []byte{}}, "files": []any{}, "files_omitted": int64(2)},
			want: resultAnswer{seq: 3, value: text{s: "v", omitted: 5}, truncated: true,
				err:    &errorAnswer{name: text{s: "E"}, value: text{s: "plain"}},
				images: [][]byte{[]byte("png")}, files: []any{}, filesOmitted: 2}},
		{name: "fields of the wrong type are zero", give: map[string]any{"op": "result", "seq": int64(1), "value": int64(7), "error": "x", "truncated": "yes"},
			want: resultAnswer{seq: 1}},
		{name: "a negative count cut off", give: map[string]any{"op": "result", "seq": int64(1), "value": []any{"v", int64(-9)}},
			want: resultAnswer{seq: 1, value: text{s: "v"}}},
		{name: "another op", give: map[string]any{"op": "fork"}, wantErr: `protocol violation: a "fork" frame`},
		{name: "no op", give: map[string]any{"seq": int64(1)}, wantErr: `protocol violation: a "" frame`},
		{name: "a result without a seq", give: map[string]any{"op": "result", "seq": "1"}, wantErr: "seq of type string"},
	}
	for _, tt := range tests {
		got, err := decodeAnswer(tt.give)
		if tt.wantErr != "" {
			assert.ErrorContains(t, err, tt.wantErr, tt.name)
			continue
		}
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.want, got, tt.name)
	}
}

// TestResultTextsCutOnce: the driver's cut text gets its note here, with the driver's count; a
// forged text beyond the limit is cut here.
func TestResultTextsCutOnce(t *testing.T) {
	got, cut := cutText([]byte("abc"), 7, 10)
	assert.True(t, cut, "the driver's cut")
	assert.Equal(t, "abc"+truncationNote(7), got, "the driver's cut, noted with its count")
	got, cut = cutText([]byte("abcdefghijkl"), 0, 10)
	assert.True(t, cut, "a forged long text")
	assert.Equal(t, "abcdefghij"+truncationNote(2), got, "cut at the limit")
}
