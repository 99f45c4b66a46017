package local

import (
	"fmt"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// A container with skills ([sandbox.Spec].Skills) starts the exec way, whatever the start
// mode: bubblewrap gives it a tmpfs of its own at the skills' root, copies each file into it
// (mode 0444, or 0555 when executable; its directories 0555) from a sealed memfd, and remounts it read-only before the
// code runs, which has no capability to remount it. The fork template cannot do that: its
// containers share its root directory, where the mount point would have to be made, so that
// every container would see it. A container without skills starts as before.

// checkSkills reports whether a container may have the skills s (nil: none).
func (l *Local) checkSkills(s *sandbox.SkillFiles) error {
	if s == nil {
		return nil
	}
	if err := s.Check(); err != nil {
		return err
	}
	if !l.isolated() {
		return &sandbox.SpecError{Field: "skills", Value: s.Root, Reason: "this server runs code without isolation, where no skill can be mounted"}
	}
	return nil
}

// skillArgs are bubblewrap's arguments mounting s at its root, its files read from descriptors
// first, first+1, ... in the order of s.Files.
func skillArgs(s *sandbox.SkillFiles, first int) []string {
	// The tmpfs holds the files and their directories' entries.
	size := s.Bytes() + int64(len(s.Files))*4096 + 1<<20
	a := []string{"--size", strconv.FormatInt(size, 10), "--perms", "0555", "--tmpfs", s.Root}
	made := map[string]bool{".": true}
	var dir func(d string)
	dir = func(d string) {
		if made[d] {
			return
		}
		dir(path.Dir(d))
		made[d] = true
		a = append(a, "--perms", "0555", "--dir", path.Join(s.Root, d))
	}
	for i, f := range s.Files {
		dir(path.Dir(f.Path))
		perms := "0444"
		if f.Exec {
			perms = "0555"
		}
		a = append(a, "--perms", perms, "--file", strconv.Itoa(first+i), path.Join(s.Root, f.Path))
	}
	return append(a, "--remount-ro", s.Root)
}

// openSkillFiles returns a sealed memfd of each of s's files, in order; the caller closes them.
func openSkillFiles(s *sandbox.SkillFiles) (_ []*os.File, err error) {
	out := make([]*os.File, 0, len(s.Files))
	defer func() {
		if err != nil {
			for _, f := range out {
				f.Close()
			}
		}
	}()
	for _, sf := range s.Files {
		fd, err := unix.MemfdCreate("skill", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			return nil, fmt.Errorf("%w: skill file: %w", sandbox.ErrUnavailable, err)
		}
		f := os.NewFile(uintptr(fd), "skill")
		out = append(out, f)
		if _, err := f.Write(sf.Data); err != nil {
			return nil, fmt.Errorf("%w: skill file: %w", sandbox.ErrUnavailable, err)
		}
		if _, err := f.Seek(0, 0); err != nil {
			return nil, fmt.Errorf("%w: skill file: %w", sandbox.ErrUnavailable, err)
		}
		if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
			return nil, fmt.Errorf("%w: skill file: %w", sandbox.ErrUnavailable, err)
		}
	}
	return out, nil
}

// addSkills adds s's files to a start's descriptors and returns bubblewrap's arguments for
// the container (nil: the Local's own, when s is nil).
func (c *container) addSkills(f *startFiles, s *sandbox.SkillFiles) ([]string, error) {
	if s == nil {
		return nil, nil
	}
	files, err := openSkillFiles(s)
	if err != nil {
		return nil, err
	}
	first := 3 + len(f.extra)
	f.child = append(f.child, files...)
	f.extra = append(f.extra, files...)
	return c.l.bwrapArgs(false, skillArgs(s, first)), nil
}
