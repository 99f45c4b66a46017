package skills

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// Ref is one skill attached to a container: a stored skill's version (SkillID, Version: a
// number, "latest", or "" for the default), or an inline zip bundle (Zip set).
type Ref struct {
	SkillID, Version string
	Zip              []byte
	// Param is the request field the Ref came from ("skills[0]"), for errors.
	Param string
}

// Mounted is a skill resolved for a container.
type Mounted struct {
	// Name and Description are its SKILL.md's front matter's.
	Name, Description string
	// Dir is its directory under the mount root ("csv-tool-<32 hex>" or "csv-tool").
	Dir string
	// Files are its bundle's.
	Files []File
}

// Resolve resolves refs of identity: stored skills through store (nil: none can be
// referenced), inline bundles through ReadZip with lim. hashed names each directory
// "<name>-<32 hex>" as OpenAI's containers do; else "<name>", each name once. An unknown skill
// or a bad bundle is an *InvalidError naming the Ref's Param.
func Resolve(ctx context.Context, store Store, lim Limits, identity string, refs []Ref, hashed bool) ([]Mounted, error) {
	out := make([]Mounted, 0, len(refs))
	dirs := map[string]bool{}
	for _, r := range refs {
		var b *Bundle
		var key string
		if r.Zip != nil {
			var err error
			if b, err = ReadZip(bytes.NewReader(r.Zip), lim); err != nil {
				var inv *InvalidError
				if errors.As(err, &inv) {
					return nil, &InvalidError{Param: r.Param + ".source.data", Message: inv.Message, TooLarge: inv.TooLarge}
				}
				return nil, err
			}
			sum := sha256.Sum256(r.Zip)
			key = hex.EncodeToString(sum[:16])
		} else {
			if store == nil {
				return nil, &InvalidError{Param: r.Param + ".skill_id", Message: fmt.Sprintf("Skill '%s' not found.", r.SkillID)}
			}
			bb, v, err := store.Bundle(ctx, identity, r.SkillID, r.Version)
			if errors.Is(err, ErrNotFound) {
				if r.Version != "" {
					return nil, &InvalidError{Param: r.Param + ".version", Message: fmt.Sprintf("Skill '%s' has no version '%s'.", r.SkillID, r.Version)}
				}
				return nil, &InvalidError{Param: r.Param + ".skill_id", Message: fmt.Sprintf("Skill '%s' not found.", r.SkillID)}
			}
			if err != nil {
				return nil, err
			}
			b = bb
			sum := sha256.Sum256([]byte(v.ID))
			key = hex.EncodeToString(sum[:16])
		}
		dir := b.Name
		if hashed {
			dir = b.Name + "-" + key
		}
		if dirs[dir] {
			return nil, &InvalidError{Param: r.Param, Message: fmt.Sprintf("Skill '%s' is given twice.", b.Name)}
		}
		dirs[dir] = true
		out = append(out, Mounted{Name: b.Name, Description: b.Description, Dir: dir, Files: b.Files})
	}
	return out, nil
}

// MountFiles returns the files of ms mounted at root, each skill in its Dir, a file marked
// executable in its bundle executable in the container; nil when ms is empty.
func MountFiles(root string, ms []Mounted) *sandbox.SkillFiles {
	if len(ms) == 0 {
		return nil
	}
	s := &sandbox.SkillFiles{Root: root}
	for _, m := range ms {
		for _, f := range m.Files {
			s.Files = append(s.Files, sandbox.SkillFile{Path: path.Join(m.Dir, f.Path), Data: f.Data, Exec: f.Exec})
		}
	}
	return s
}
