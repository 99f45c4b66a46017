package local

import (
	"fmt"
	"strings"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// The driver runs in the code's own process: the code can replace its scanner or write frames
// of its own (see the adversarial suite), so everything a run's answer says is the tenant's
// input. The file list is checked here, where the answer is decoded, before anything of it is
// kept: each path must be one the code could have written (reportedPath), the list is bounded
// in entries (maxFiles) and in bytes of paths (maxFileListBytes), and a path is listed once.
// What is left out is said in the Result's FilesNote, never kept.

// reportFiles adds to res the files of a run's answer: list is the answer's "files" value, a
// list of [path, size] pairs, and omitted the number of files the driver left out of it (its
// own byte bound); hostDir is the container's data directory on the host ("" under isolation).
func reportFiles(res *sandbox.Result, list any, omitted int64, hostDir string) {
	files, _ := list.([]any)
	seen := make(map[string]struct{}, len(files))
	refused, over := 0, max(omitted, 0)
	size := 0
	for _, f := range files {
		pair, ok := f.([]any)
		if !ok || len(pair) != 2 {
			refused++
			continue
		}
		raw, _ := pair[0].(string)
		n, ok := pair[1].(int64)
		p, valid := reportedPath(raw, hostDir)
		if !valid || !ok || n < 0 {
			refused++
			continue
		}
		if isUploadTemp(p) {
			continue // an upload in progress, not the code's file
		}
		if _, dup := seen[p]; dup {
			refused++
			continue
		}
		if len(res.Files) >= maxFiles || size+len(p) > maxFileListBytes {
			over++
			continue
		}
		seen[p] = struct{}{}
		size += len(p)
		res.Files = append(res.Files, sandbox.File{Path: p, Size: n})
	}
	if over > 0 {
		res.AddFilesNote(fmt.Sprintf("[%d more files written are not listed: a run lists at most %d files and %d bytes of their paths]",
			over, maxFiles, maxFileListBytes))
	}
	if refused > 0 {
		res.AddFilesNote(fmt.Sprintf("[%d entries of the run's file list were refused: not a file path under %s]", refused, dataDir))
	}
}

// reportedPath returns the container path of a path the driver reported, and whether it is one
// a file the code wrote may have: after mapping from the host's data directory (hostDir, when
// not isolated), it must be exactly what [sandbox.CleanPath] makes of it (absolute, clean,
// strictly under /mnt/data, no NUL, at most 4095 bytes, components of at most 255).
func reportedPath(p, hostDir string) (string, bool) {
	if len(p) > len(hostDir)+4096 {
		return "", false // not even looked at further
	}
	p, ok := mapPath(p, hostDir)
	if !ok {
		return "", false
	}
	c, err := sandbox.CleanPath(p)
	if err != nil || c != p {
		return "", false
	}
	return c, true
}

// mapPath turns a path the driver reported into the container's view (/mnt/data/...); ok is
// false for a path outside the container's data directory on the host.
func mapPath(p, hostDir string) (string, bool) {
	if hostDir == "" {
		return p, true
	}
	if rel, ok := strings.CutPrefix(p, hostDir); ok && (rel == "" || rel[0] == '/') {
		return dataDir + rel, true
	}
	return "", false
}
