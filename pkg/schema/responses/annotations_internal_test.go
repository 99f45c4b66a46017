package responses

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

func testFiles() *writtenFiles {
	var w writtenFiles
	w.add(&schema.CodeCall{ContainerID: "cntr_1", Files: []schema.CodeFile{
		{ID: "cfile_csv", Path: "/mnt/data/clean.csv", Bytes: 10},
		{ID: "cfile_png", Path: "/mnt/data/chart.png", Bytes: 20},
		{ID: "cfile_sp", Path: "/mnt/data/my file.txt", Bytes: 1},
		{ID: "", Path: "/mnt/data/noid.txt", Bytes: 1}, // no container file id: cannot be cited
	}})
	return &w
}

// span is what a citation covers of text, in code points.
func spanOf(text string, c citation) string {
	r := []rune(text)
	return string(r[c.start:c.end])
}

func TestCite(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []string // the spans cited, in order
		ids  []string
	}{
		{name: "link", give: "Here: [Download the CSV](sandbox:/mnt/data/clean.csv).",
			want: []string{"[Download the CSV](sandbox:/mnt/data/clean.csv)"}, ids: []string{"cfile_csv"}},
		{name: "non-ASCII before the link", give: "Résumé – données 📈: [the chart](sandbox:/mnt/data/chart.png)",
			want: []string{"[the chart](sandbox:/mnt/data/chart.png)"}, ids: []string{"cfile_png"}},
		{name: "bare path", give: "I saved it to /mnt/data/clean.csv. Done.",
			want: []string{"/mnt/data/clean.csv"}, ids: []string{"cfile_csv"}},
		{name: "bare sandbox path", give: "see sandbox:/mnt/data/chart.png",
			want: []string{"sandbox:/mnt/data/chart.png"}, ids: []string{"cfile_png"}},
		{name: "link and bare path, several files", give: "ü [csv](sandbox:/mnt/data/clean.csv) and /mnt/data/chart.png, also /mnt/data/clean.csv",
			want: []string{"[csv](sandbox:/mnt/data/clean.csv)", "/mnt/data/chart.png", "/mnt/data/clean.csv"},
			ids:  []string{"cfile_csv", "cfile_png", "cfile_csv"}},
		{name: "escaped link target", give: "[f](sandbox:/mnt/data/my%20file.txt)",
			want: []string{"[f](sandbox:/mnt/data/my%20file.txt)"}, ids: []string{"cfile_sp"}},
		{name: "longer name is another file", give: "/mnt/data/clean.csvfoo and /mnt/data/clean.csv.bak"},
		{name: "inside a longer path", give: "/home/mnt/data/clean.csv"},
		{name: "file not written", give: "[x](sandbox:/mnt/data/other.csv) /mnt/data/other.csv"},
		{name: "file without id", give: "[x](sandbox:/mnt/data/noid.txt)"},
		{name: "no path", give: "nothing to cite here"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := testFiles().cite(tt.give)
			var spans, ids []string
			for _, c := range got {
				spans = append(spans, spanOf(tt.give, c))
				ids = append(ids, c.file.fileID)
				assert.Equal(t, "cntr_1", c.file.containerID, "container of a citation in %q", tt.give)
				assert.LessOrEqual(t, c.end, utf8.RuneCountInString(tt.give), "end of a citation in %q", tt.give)
			}
			assert.Equal(t, tt.want, spans, "spans cited in %q", tt.give)
			assert.Equal(t, tt.ids, ids, "files cited in %q", tt.give)
		})
	}
}

// The indices count code points, as Python's str does: the text before the link has
// multi-byte characters.
func TestCiteIndices(t *testing.T) {
	text := "é😀 [c](sandbox:/mnt/data/clean.csv)"
	got := testFiles().cite(text)
	if assert.Len(t, got, 1, "citations of %q", text) {
		assert.Equal(t, 3, got[0].start, "start of the citation in %q", text)
		assert.Equal(t, 3+len("[c](sandbox:/mnt/data/clean.csv)"), got[0].end, "end of the citation in %q", text)
		assert.Equal(t, "clean.csv", got[0].filename, "filename of the citation in %q", text)
	}
}

// A citation is streamed early only once no text that follows can change it.
func TestCitationSettled(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"[c](sandbox:/mnt/data/clean.csv)", true},
		{"see /mnt/data/clean.csv", false},
		{"see /mnt/data/clean.csv.", false},
		{"see /mnt/data/clean.csv. Next", true},
		{"see /mnt/data/clean.csv\n", true},
		{"[/mnt/data/clean.csv ", false},
		{"[x] /mnt/data/clean.csv ", true},
	}
	for _, tt := range tests {
		cites := testFiles().cite(tt.give)
		if assert.Len(t, cites, 1, "citations of %q", tt.give) {
			assert.Equal(t, tt.want, cites[0].settled(tt.give), "settled in %q", tt.give)
		}
	}
}
