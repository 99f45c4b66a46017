package skills

import (
	"archive/zip"
	"bytes"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const skillMD = "---\nname: csv-insights\ndescription: Summarise a CSV file.\n---\n# CSV insights\nRun scripts/summarise.py.\n"

// entry is one entry of a test zip.
type entry struct {
	name string
	data string
	mode fs.FileMode
}

func makeZip(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.mode != 0 {
			h.SetMode(e.mode)
		}
		w, err := zw.CreateHeader(h)
		require.NoError(t, err, e.name)
		_, err = w.Write([]byte(e.data))
		require.NoError(t, err, e.name)
	}
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func TestReadZip(t *testing.T) {
	z := makeZip(t,
		entry{name: "csv-insights/"},
		entry{name: "csv-insights/SKILL.md", data: skillMD},
		entry{name: "csv-insights/scripts/summarise.py", data: "print('hi')\n", mode: 0o755},
	)
	b, err := ReadZip(bytes.NewReader(z), Limits{})
	require.NoError(t, err)
	assert.Equal(t, "csv-insights", b.Name)
	assert.Equal(t, "Summarise a CSV file.", b.Description)
	require.Len(t, b.Files, 2)
	assert.Equal(t, "SKILL.md", b.Files[0].Path)
	assert.Equal(t, "scripts/summarise.py", b.Files[1].Path)
	assert.True(t, b.Files[1].Exec, "the script keeps its exec bit")
	assert.Equal(t, int64(len(skillMD)+len("print('hi')\n")), b.Size())

	// A bundle zipped again reads back the same.
	var again bytes.Buffer
	require.NoError(t, b.Zip(&again, "csv-insights"))
	b2, err := ReadZip(&again, Limits{})
	require.NoError(t, err)
	assert.Equal(t, b, b2)
}

func TestReadZipAtRoot(t *testing.T) {
	b, err := ReadZip(bytes.NewReader(makeZip(t, entry{name: "skill.md", data: skillMD}, entry{name: "a/b.txt", data: "x"})), Limits{})
	require.NoError(t, err)
	assert.Equal(t, "csv-insights", b.Name)
	assert.Equal(t, []string{"skill.md", "a/b.txt"}, []string{b.Files[0].Path, b.Files[1].Path})
}

func TestReadZipRefuses(t *testing.T) {
	md := entry{name: "s/SKILL.md", data: skillMD}
	many := []entry{md}
	for i := range 10 {
		many = append(many, entry{name: "s/f" + strings.Repeat("x", i), data: "x"})
	}
	tests := []struct {
		name   string
		give   []byte
		lim    Limits
		want   string
		tooBig bool
	}{
		{name: "traversal", give: makeZip(t, md, entry{name: "s/../../etc/passwd", data: "x"}), want: "climbs out"},
		{name: "leading dotdot", give: makeZip(t, md, entry{name: "../x", data: "x"}), want: "climbs out"},
		{name: "absolute", give: makeZip(t, md, entry{name: "/etc/cron.d/x", data: "x"}), want: "absolute"},
		{name: "drive letter", give: makeZip(t, md, entry{name: "C:/x", data: "x"}), want: "absolute"},
		{name: "backslash", give: makeZip(t, md, entry{name: "s\\..\\..\\x", data: "x"}), want: "backslash"},
		{name: "symlink", give: makeZip(t, md, entry{name: "s/link", data: "/etc/passwd", mode: fs.ModeSymlink | 0o777}), want: "symbolic link"},
		{name: "device", give: makeZip(t, md, entry{name: "s/dev", mode: fs.ModeDevice | 0o644}), want: "not a regular file"},
		{name: "fifo", give: makeZip(t, md, entry{name: "s/fifo", mode: fs.ModeNamedPipe | 0o644}), want: "not a regular file"},
		{name: "bomb", give: makeZip(t, md, entry{name: "s/zeros", data: strings.Repeat("\x00", 4<<20)}), want: "zip bombs"},
		{name: "file too large", give: makeZip(t, md, entry{name: "s/big", data: strings.Repeat("ab", 600)}), lim: Limits{MaxFileBytes: 1000}, want: "too large", tooBig: true},
		{name: "bundle too large", give: makeZip(t, md, entry{name: "s/a", data: strings.Repeat("a", 900)}, entry{name: "s/b", data: strings.Repeat("b", 900)}),
			lim: Limits{MaxBundleBytes: 1500}, want: "too large", tooBig: true},
		{name: "zip too large", give: makeZip(t, md, entry{name: "s/a", data: strings.Repeat("a", 900)}), lim: Limits{MaxZipBytes: 200}, want: "too large", tooBig: true},
		{name: "too many files", give: makeZip(t, many...), lim: Limits{MaxFiles: 3}, want: "too many"},
		{name: "not a zip", give: []byte("PK\x03\x04 not really"), want: "not a valid zip"},
		{name: "no SKILL.md", give: makeZip(t, entry{name: "s/README.md", data: "x"}), want: "no SKILL.md"},
		{name: "SKILL.md deeper", give: makeZip(t, entry{name: "s/t/SKILL.md", data: skillMD}, entry{name: "u/x", data: "x"}), want: "no SKILL.md"},
		{name: "both SKILL.md and skill.md", give: makeZip(t, md, entry{name: "s/skill.md", data: skillMD}), want: "exactly one"},
		{name: "repeated", give: makeZip(t, md, entry{name: "s/a", data: "1"}, entry{name: "s/a", data: "2"}), want: "repeated"},
		{name: "file and folder", give: makeZip(t, md, entry{name: "s/a", data: "1"}, entry{name: "s/a/b", data: "2"}), want: "both a file and a folder"},
		{name: "no front matter", give: makeZip(t, entry{name: "s/SKILL.md", data: "# hi\n"}), want: "no front matter"},
		{name: "unclosed front matter", give: makeZip(t, entry{name: "s/SKILL.md", data: "---\nname: a\n"}), want: "not closed"},
		{name: "no name", give: makeZip(t, entry{name: "s/SKILL.md", data: "---\ndescription: d\n---\n"}), want: "no 'name'"},
		{name: "no description", give: makeZip(t, entry{name: "s/SKILL.md", data: "---\nname: a\n---\n"}), want: "no 'description'"},
		{name: "bad name", give: makeZip(t, entry{name: "s/SKILL.md", data: "---\nname: Bad_Name\ndescription: d\n---\n"}), want: "is invalid"},
		{name: "long description", give: makeZip(t, entry{name: "s/SKILL.md", data: "---\nname: a\ndescription: " + strings.Repeat("d", 1025) + "\n---\n"}), want: "longer than 1024"},
		{name: "bad yaml", give: makeZip(t, entry{name: "s/SKILL.md", data: "---\nname: [a\n---\n"}), want: "not valid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadZip(bytes.NewReader(tt.give), tt.lim)
			var inv *InvalidError
			require.ErrorAs(t, err, &inv, tt.name)
			assert.Contains(t, inv.Message, tt.want, tt.name)
			assert.Equal(t, tt.tooBig, inv.TooLarge, tt.name)
		})
	}
}

// TestReadZipEntryCountBoundedBeforeParsing: a zip whose central directory has more entries
// than the bound is refused before archive/zip allocates them.
func TestReadZipEntryCountBoundedBeforeParsing(t *testing.T) {
	var es []entry
	for i := range 50 {
		es = append(es, entry{name: "s/d" + strings.Repeat("x", i) + "/"})
	}
	_, err := ReadZip(bytes.NewReader(makeZip(t, es...)), Limits{MaxFiles: 10})
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	assert.Contains(t, inv.Message, "too many entries")
}

func TestFrontMatter(t *testing.T) {
	tests := []struct {
		name, give, wantName, wantDesc string
	}{
		{name: "plain", give: skillMD, wantName: "csv-insights", wantDesc: "Summarise a CSV file."},
		{name: "crlf and bom", give: "\xef\xbb\xbf---\r\nname: a1\r\ndescription: 'quoted: yes'\r\n---\r\nbody", wantName: "a1", wantDesc: "quoted: yes"},
		{name: "folded", give: "---\nname: x\ndescription: >\n  one\n  two\nlicense: MIT\n---\n", wantName: "x", wantDesc: "one two"},
		{name: "closed at end", give: "---\nname: x\ndescription: d\n---", wantName: "x", wantDesc: "d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, d, err := parseFrontMatter([]byte(tt.give))
			require.NoError(t, err, tt.give)
			assert.Equal(t, tt.wantName, n)
			assert.Equal(t, tt.wantDesc, d)
		})
	}
}

func TestBuilder(t *testing.T) {
	b := NewBuilder(Limits{MaxFileBytes: 200, MaxZipBytes: 1000})
	require.NoError(t, b.Add("csv-insights/SKILL.md", strings.NewReader(skillMD)))
	require.NoError(t, b.Add("csv-insights/run.sh", strings.NewReader("echo hi\n")))
	bundle, err := b.Bundle()
	require.NoError(t, err)
	assert.Equal(t, "csv-insights", bundle.Name)
	assert.Equal(t, "run.sh", bundle.Files[1].Path)
	assert.True(t, bundle.Files[1].Exec)

	var inv *InvalidError
	require.ErrorAs(t, b.Add("csv-insights/big", strings.NewReader(strings.Repeat("x", 201))), &inv)
	assert.True(t, inv.TooLarge)
	require.ErrorAs(t, b.Add("../x", strings.NewReader("x")), &inv)
	assert.Contains(t, inv.Message, "climbs out")

	full := NewBuilder(Limits{MaxFileBytes: 100, MaxZipBytes: 150})
	require.NoError(t, full.Add("a", strings.NewReader(strings.Repeat("x", 100))))
	require.ErrorAs(t, full.Add("b", strings.NewReader(strings.Repeat("x", 60))), &inv)
	assert.Contains(t, inv.Message, "together")
}

// FuzzReadSkillZip: whatever the bytes, ReadZip returns a bundle within its limits, with
// clean relative paths, or an error; it never panics.
func FuzzReadSkillZip(f *testing.F) {
	md := entry{name: "s/SKILL.md", data: skillMD}
	f.Add(makeZip(f, md))
	f.Add(makeZip(f, md, entry{name: "s/../../x", data: "x"}))
	f.Add(makeZip(f, md, entry{name: "/abs", data: "x"}))
	f.Add(makeZip(f, md, entry{name: "s/link", data: "/etc/passwd", mode: fs.ModeSymlink | 0o777}))
	f.Add(makeZip(f, md, entry{name: "s/dev", mode: fs.ModeDevice}))
	f.Add(makeZip(f, md, entry{name: "s/zeros", data: strings.Repeat("\x00", 2<<20)}))
	f.Add([]byte("PK\x05\x06" + strings.Repeat("\x00", 18)))
	lim := Limits{MaxZipBytes: 1 << 20, MaxFiles: 20, MaxFileBytes: 64 << 10, MaxBundleBytes: 256 << 10}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ReadZip(bytes.NewReader(data), lim)
		if err != nil {
			return
		}
		assert.LessOrEqual(t, len(b.Files), 20)
		assert.LessOrEqual(t, b.Size(), int64(256<<10))
		for _, f := range b.Files {
			_, err := cleanPath(f.Path)
			assert.NoError(t, err, f.Path)
			assert.LessOrEqual(t, int64(len(f.Data)), int64(64<<10))
		}
		assert.True(t, validName(b.Name), b.Name)
	})
}
