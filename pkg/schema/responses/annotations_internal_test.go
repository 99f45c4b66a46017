package responses

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
			assert.Equal(t, tt.want, cites[0].settled(tt.give, 0), "settled in %q", tt.give)
		}
	}
}

// A path that ends with "[" mentioned right before a link to it: the link starts inside the
// mention, which then is not one (the spans overlapped and the indices went back).
func TestCiteOverlappingLink(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		give  string
		want  []string
	}{
		{name: "one file", files: []string{"/mnt/data/q["},
			give: "/mnt/data/q[ l](sandbox:/mnt/data/q[)", want: []string{"[ l](sandbox:/mnt/data/q[)"}},
		{name: "two files", files: []string{"/mnt/data/q[", "/mnt/data/r"},
			give: "/mnt/data/r /mnt/data/q[ l](sandbox:/mnt/data/q[)",
			want: []string{"/mnt/data/r", "[ l](sandbox:/mnt/data/q[)"}},
		{name: "sandbox prefix", files: []string{"/mnt/data/q["},
			give: "sandbox:/mnt/data/q[ l](sandbox:/mnt/data/q[)", want: []string{"[ l](sandbox:/mnt/data/q[)"}},
		{name: "link inside a link's target", files: []string{"/mnt/data/q[", "/mnt/data/r"},
			give: "[a](sandbox:/mnt/data/q[) ](sandbox:/mnt/data/r)", want: []string{"[a](sandbox:/mnt/data/q[)", "sandbox:/mnt/data/r"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := filesAt(tt.files...)
			var spans []string
			require.NotPanics(t, func() {
				for _, c := range w.cite(tt.give) {
					spans = append(spans, spanOf(tt.give, c))
				}
			}, "cite %q", tt.give)
			assert.Equal(t, tt.want, spans, "spans cited in %q", tt.give)
		})
	}
}

// filesAt returns the written files at paths, one container file each.
func filesAt(paths ...string) *writtenFiles {
	var w writtenFiles
	c := &schema.CodeCall{ContainerID: "cntr_1"}
	for i, p := range paths {
		c.Files = append(c.Files, schema.CodeFile{ID: "cfile_" + itoa(i), Path: p, Bytes: 1})
	}
	w.add(c)
	return &w
}

// checkCitations checks cites against text: spans within it, in order, not overlapping, their
// code point indices those of their bytes, each naming a written file.
func checkCitations(t *testing.T, w *writtenFiles, text string, cites []citation) {
	t.Helper()
	prevEnd, prevByteEnd := 0, 0
	for _, c := range cites {
		require.True(t, prevByteEnd <= c.byteStart && c.byteStart < c.byteEnd && c.byteEnd <= len(text),
			"span [%d,%d) after %d in %q", c.byteStart, c.byteEnd, prevByteEnd, text)
		assert.Equal(t, utf8.RuneCountInString(text[:c.byteStart]), c.start, "start index in %q", text)
		assert.Equal(t, utf8.RuneCountInString(text[:c.byteEnd]), c.end, "end index in %q", text)
		assert.LessOrEqual(t, prevEnd, c.start, "citations in order in %q", text)
		found := false
		for _, f := range w.byPath {
			found = found || f == c.file
		}
		assert.True(t, found, "citation of a written file in %q", text)
		prevEnd, prevByteEnd = c.end, c.byteEnd
	}
}

func FuzzCite(f *testing.F) {
	f.Add("/mnt/data/q[ l](sandbox:/mnt/data/q[)", "/mnt/data/q[", "/mnt/data/r", uint8(5))
	f.Add("/mnt/data/r /mnt/data/q[ l](sandbox:/mnt/data/q[)", "/mnt/data/q[", "/mnt/data/r", uint8(3))
	f.Add("ü [csv](sandbox:/mnt/data/clean.csv) and /mnt/data/chart.png, also sandbox:/mnt/data/clean.csv.",
		"/mnt/data/clean.csv", "/mnt/data/chart.png", uint8(7))
	f.Add("[f](sandbox:/mnt/data/my%20file.txt) [/mnt/data/my file.txt](sandbox:/mnt/data/a)", "/mnt/data/my file.txt", "/mnt/data/a", uint8(1))
	f.Fuzz(func(t *testing.T, text, p1, p2 string, chunk uint8) {
		w := filesAt(dataDir+strings.TrimPrefix(p1, dataDir), dataDir+strings.TrimPrefix(p2, dataDir))
		cites := w.cite(text)
		checkCitations(t, w, text, cites)
		// Streamed in chunks, the citations taken are the same, in the same order.
		assert.Equal(t, append([]citation{}, cites...), append([]citation{}, streamCites(w, text, max(int(chunk), 1))...), "citations of %q streamed in chunks of %d", text, chunk)
	})
}

// streamCites returns the citations a part's text streamed in chunks of n bytes gets, as
// citeLive takes them: after each chunk, and all the rest once the text is done.
func streamCites(w *writtenFiles, text string, n int) []citation {
	var p livePart
	var out []citation
	for i := n; i < len(text); i += n {
		out = append(out, p.take(w, text[:i], false)...)
	}
	return append(out, p.take(w, text, true)...)
}

// Streamed, the scan resumes where the text may still start a citation: after a long text,
// what is left to scan is about the longest written path, whatever the length of the text
// or the number of files.
func TestTakeScansOnlyTheTail(t *testing.T) {
	paths := make([]string, 10000)
	for i := range paths {
		paths[i] = "/mnt/data/out/file" + itoa(i) + ".csv"
	}
	w := filesAt(paths...)
	var text strings.Builder
	var p livePart
	taken := 0
	for i := range 2000 {
		text.WriteString("Row " + itoa(i) + " is in /mnt/data/out/file" + itoa(i) + ".csv, see [it](sandbox:/mnt/data/out/file" + itoa(i) + ".csv). ")
		taken += len(p.take(w, text.String(), false))
		assert.LessOrEqual(t, text.Len()-p.from, w.longest+len(sandboxScheme)+1+len(" see [it](sandbox:"), "tail left to scan after row %d", i)
	}
	taken += len(p.take(w, text.String(), true))
	assert.Equal(t, 4000, taken, "every mention and link is cited once")
	assert.Len(t, w.cite(text.String()), 4000)
}

// BenchmarkTake is the work of one delta of a long streamed text citing many files: it does
// not grow with the text (compare -benchtime runs of different rows).
func BenchmarkTake(b *testing.B) {
	for _, rows := range []int{100, 1000, 10000} {
		b.Run("rows="+itoa(rows), func(b *testing.B) {
			paths := make([]string, 10000)
			for i := range paths {
				paths[i] = "/mnt/data/out/file" + itoa(i) + ".csv"
			}
			w := filesAt(paths...)
			var text strings.Builder
			var p livePart
			for i := range rows {
				text.WriteString("Row " + itoa(i) + " is in /mnt/data/out/file" + itoa(i) + ".csv. ")
				p.take(w, text.String(), false)
			}
			for i := 0; b.Loop(); i++ {
				text.WriteString("x /mnt/data/out/file" + itoa(i%10000) + ".csv ")
				p.take(w, text.String(), false)
			}
		})
	}
}
