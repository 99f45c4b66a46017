package sandbox

import (
	"fmt"
	"path"
	"strings"
)

// The bounds of a container's SkillFiles, checked by [SkillFiles.Check]: the files of up to
// eight skills at the native bundle limits would be more than a container start should copy,
// and than a Spec should hold for a container's life (a Manager keeps it, to restart the
// container) or carry to a sandbox node (whose messages are at most 64 MiB by default), so a
// container holds at most this much of them.
const (
	MaxSkillFiles = 2000
	MaxSkillBytes = 48 << 20
)

// SkillFiles are the skills' files a container is created with, mounted read-only at Root: the
// code can read them, and can neither change, remove, chmod nor remount them. Each file's Path
// is relative to Root ("pdf-tools/SKILL.md"); the directories are made as the paths need them.
// Every file is readable by the code, and executable too when its Exec is set.
type SkillFiles struct {
	// Root is where the files are mounted, an absolute path outside the container's system
	// and data directories: "/home/oai/skills" (OpenAI) or "/skills" (Anthropic).
	Root  string
	Files []SkillFile
}

// SkillFile is one file of a SkillFiles.
type SkillFile struct {
	Path string
	Data []byte
	// Exec reports whether the file is executable (mode 0555 rather than 0444), as it was
	// marked in its bundle, so that a skill's script runs as "./scripts/run.sh".
	Exec bool
}

// Bytes is the size of the files together.
func (s *SkillFiles) Bytes() int64 {
	var n int64
	for _, f := range s.Files {
		n += int64(len(f.Data))
	}
	return n
}

// reservedRoots are the container's own directories, where no skill may be mounted.
var reservedRoots = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
	"/proc", "/dev", "/tmp", "/mnt", "/sys", "/run", "/var", "/opt"}

// Check reports whether s may be mounted: Root an absolute clean path outside the container's
// own directories, each Path clean, relative, inside Root and named once, within MaxSkillFiles
// and MaxSkillBytes. An error is a *SpecError (field "skills").
func (s *SkillFiles) Check() error {
	bad := func(v, reason string) error { return &SpecError{Field: "skills", Value: v, Reason: reason} }
	if !path.IsAbs(s.Root) || path.Clean(s.Root) != s.Root || s.Root == "/" {
		return bad(s.Root, "not an absolute clean path")
	}
	for _, r := range reservedRoots {
		if s.Root == r || strings.HasPrefix(s.Root, r+"/") {
			return bad(s.Root, "inside a directory the container's system uses")
		}
	}
	if len(s.Files) == 0 {
		return bad(s.Root, "no files")
	}
	if len(s.Files) > MaxSkillFiles {
		return bad(fmt.Sprint(len(s.Files), " files"), fmt.Sprint("more than ", MaxSkillFiles, " files in one container"))
	}
	if n := s.Bytes(); n > MaxSkillBytes {
		return bad(fmt.Sprint(n, " bytes"), fmt.Sprint("more than ", MaxSkillBytes, " bytes of skills in one container"))
	}
	seen := make(map[string]bool, len(s.Files))
	for _, f := range s.Files {
		p := f.Path
		if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") ||
			strings.ContainsAny(p, "\x00\n") {
			return bad(p, "not a clean relative path")
		}
		if seen[p] {
			return bad(p, "named twice")
		}
		seen[p] = true
	}
	for _, f := range s.Files { // a file may not also be a directory of another
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			if seen[dir] {
				return bad(dir, "both a file and a directory")
			}
		}
	}
	return nil
}
