package local

import (
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

func TestReportFiles(t *testing.T) {
	long := "/mnt/data/" + strings.Repeat(strings.Repeat("d", 250)+"/", 16) + strings.Repeat("f", 200)
	fit := maxFileListBytes / len(manyFiles(1, 4000)[0].([]any)[0].(string))
	tests := []struct {
		name        string
		give        []any
		hostDir     string
		omitted     int64
		want        []sandbox.File
		wantRefused bool
		wantOver    bool
	}{
		{name: "clean paths", give: []any{[]any{"/mnt/data/a", int64(1)}, []any{"/mnt/data/d/b", int64(2)}},
			want: []sandbox.File{{Path: "/mnt/data/a", Size: 1}, {Path: "/mnt/data/d/b", Size: 2}}},
		{name: "the longest clean path", give: []any{[]any{long[:4095], int64(0)}}, want: []sandbox.File{{Path: long[:4095]}}},
		{name: "too long a path", give: []any{[]any{long[:4094] + "/x", int64(0)}}, wantRefused: true},
		{name: "not clean", give: []any{[]any{"/mnt/data/a/../b", int64(1)}}, wantRefused: true},
		{name: "a trailing slash", give: []any{[]any{"/mnt/data/a/", int64(1)}}, wantRefused: true},
		{name: "outside the data directory", give: []any{[]any{"/etc/passwd", int64(1)}}, wantRefused: true},
		{name: "the data directory itself", give: []any{[]any{"/mnt/data", int64(1)}}, wantRefused: true},
		{name: "relative", give: []any{[]any{"a", int64(1)}}, wantRefused: true},
		{name: "a NUL", give: []any{[]any{"/mnt/data/a\x00b", int64(1)}}, wantRefused: true},
		{name: "a component over 255 bytes", give: []any{[]any{"/mnt/data/" + strings.Repeat("x", 256), int64(1)}}, wantRefused: true},
		{name: "8 MiB", give: []any{[]any{"/mnt/data/" + strings.Repeat("x", 8<<20), int64(1)}}, wantRefused: true},
		{name: "a negative size", give: []any{[]any{"/mnt/data/a", int64(-1)}}, wantRefused: true},
		{name: "not a pair", give: []any{"/mnt/data/a", []any{"/mnt/data/b"}, []any{int64(1), "/mnt/data/c"}}, wantRefused: true},
		{name: "a path twice", give: []any{[]any{"/mnt/data/a", int64(1)}, []any{"/mnt/data/a", int64(2)}},
			want: []sandbox.File{{Path: "/mnt/data/a", Size: 1}}, wantRefused: true},
		{name: "an upload in progress", give: []any{[]any{"/mnt/data/" + uploadPrefix + "x", int64(1)}}},
		{name: "mapped from the host", hostDir: "/work/c1", give: []any{[]any{"/work/c1/a", int64(1)}},
			want: []sandbox.File{{Path: "/mnt/data/a", Size: 1}}},
		{name: "outside the host's data directory", hostDir: "/work/c1", give: []any{[]any{"/mnt/data/a", int64(1)}, []any{"/work/c10/a", int64(1)}},
			wantRefused: true},
		{name: "files the driver left out", give: []any{[]any{"/mnt/data/a", int64(1)}}, omitted: 3,
			want: []sandbox.File{{Path: "/mnt/data/a", Size: 1}}, wantOver: true},
		{name: "more paths than a list holds", give: manyFiles(fit+1, 4000), want: listOf(manyFiles(fit, 4000)), wantOver: true},
		{name: "more files than a list holds", give: manyFiles(maxFiles+1, 20), want: listOf(manyFiles(maxFiles, 20)), wantOver: true},
	}
	for _, tt := range tests {
		var res sandbox.Result
		reportFiles(&res, tt.give, tt.omitted, tt.hostDir)
		assert.Equal(t, tt.want, res.Files, "%s: the files listed", tt.name)
		assert.Equal(t, tt.wantRefused, strings.Contains(res.FilesNote, "refused"), "%s: a note of refused entries: %q", tt.name, res.FilesNote)
		assert.Equal(t, tt.wantOver, strings.Contains(res.FilesNote, "not listed"), "%s: a note of files not listed: %q", tt.name, res.FilesNote)
	}
}

// manyFiles returns a file list of n distinct paths of about size bytes (at least 20).
func manyFiles(n, size int) []any {
	out := make([]any, n)
	dir := "/mnt/data/" + strings.Repeat(strings.Repeat("d", 200)+"/", max(size/201-1, 0))
	name := strings.Repeat("f", max(min(size-len(dir)-10, 200), 0))
	for i := range n {
		out[i] = []any{dir + name + fmt.Sprintf("%010d", i), int64(i)}
	}
	return out
}

func listOf(list []any) []sandbox.File {
	out := make([]sandbox.File, len(list))
	for i, f := range list {
		pair := f.([]any)
		out[i] = sandbox.File{Path: pair[0].(string), Size: pair[1].(int64)}
	}
	return out
}

// FuzzReportedPath: what reportedPath accepts is a clean path strictly under /mnt/data that the
// server would itself make of it, within Linux's bounds; and the host's data directory maps onto
// /mnt/data exactly.
func FuzzReportedPath(f *testing.F) {
	for _, s := range []string{"/mnt/data/a", "/mnt/data/a/../b", "/mnt/data//a", "/mnt/data/./a", "/mnt/data/", "/mnt/data",
		"/mnt/datax/a", "/mnt/data/a\x00", "/mnt/data/\xff", "a", "/mnt/data/" + strings.Repeat("x", 256), "/host/c/a"} {
		f.Add(s, "")
		f.Add(s, "/host/c")
	}
	f.Fuzz(func(t *testing.T, p, hostDir string) {
		got, ok := reportedPath(p, hostDir)
		if !ok {
			assert.Empty(t, got, "nothing of a refused path")
			return
		}
		rel, under := strings.CutPrefix(got, dataDir+"/")
		assert.True(t, under && rel != "", "%q (host %q) → %q is strictly under %s", p, hostDir, got, dataDir)
		assert.Equal(t, path.Clean(got), got, "%q → %q is clean", p, got)
		assert.LessOrEqual(t, len(got), 4095, "%q → %q is at most 4095 bytes", p, got)
		assert.NotContains(t, got, "\x00", "%q → %q has no NUL", p, got)
		for part := range strings.SplitSeq(rel, "/") {
			assert.True(t, part != "" && part != "." && part != ".." && len(part) <= 255, "%q → %q: component %q", p, got, part)
		}
		again, err := sandbox.CleanPath(got)
		assert.NoError(t, err, "%q → %q is a path the server accepts", p, got)
		assert.Equal(t, got, again, "%q → %q is what the server makes of it", p, got)
		if hostDir == "" {
			assert.Equal(t, p, got, "under isolation the path is taken as reported")
		} else {
			assert.Equal(t, hostDir+strings.TrimPrefix(got, dataDir), p, "%q maps from the host's data directory %q", got, hostDir)
		}
	})
}

// FuzzReportFiles: whatever file list an answer carries (any marshal value), what reportFiles
// lists is bounded in entries and bytes, each path is one reportedPath accepts, listed once.
func FuzzReportFiles(f *testing.F) {
	for _, list := range [][]any{
		{[]any{"/mnt/data/a", int64(1)}, []any{"/mnt/data/a/../b", int64(2)}},
		{[]any{"/mnt/data/a", int64(1)}, []any{"/mnt/data/a", int64(1)}, "x", []any{}},
		{[]any{"/mnt/data/" + strings.Repeat("x", 300), int64(1)}, []any{"/mnt/data/b", int64(-5)}},
	} {
		b, err := marshalEncode(list)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, int64(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, omitted int64) {
		v, err := marshalDecode(data)
		if err != nil {
			return
		}
		var res sandbox.Result
		reportFiles(&res, v, omitted, "")
		assert.LessOrEqual(t, len(res.Files), maxFiles, "at most maxFiles listed")
		size := 0
		seen := map[string]bool{}
		for _, file := range res.Files {
			size += len(file.Path)
			p, ok := reportedPath(file.Path, "")
			assert.True(t, ok && p == file.Path, "%q is a valid path", file.Path)
			assert.False(t, seen[file.Path], "%q is listed once", file.Path)
			assert.GreaterOrEqual(t, file.Size, int64(0), "%q has a size", file.Path)
			seen[file.Path] = true
		}
		assert.LessOrEqual(t, size, maxFileListBytes, "at most maxFileListBytes of paths listed")
	})
}
