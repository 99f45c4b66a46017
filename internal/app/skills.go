package app

import (
	"context"
	"encoding/json"
	"path"
	"strings"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/containers"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/skills"
)

// skillStore returns the store of the Skills API (/v1/skills) of cfg, or nil where the API is
// not served.
//
// The single process (store memory) keeps skills in memory, bounded per identity and in all
// by cfg.skills. A fleet (store redis) does not serve the API yet: a skill kept in one
// replica's memory would be unknown to the next replica a client reaches. The fleet's store is
// to keep each bundle's bytes on the sandbox nodes' disks (a bundle may be 100 MiB
// uncompressed: too heavy for Redis) and its metadata, with the node that holds it, in Redis,
// as containers are.
func skillStore(cfg *configv1.Config) skills.Store {
	if cfg.GetStore() == config.StoreRedis {
		return nil
	}
	c := cfg.GetSkills()
	return skills.NewMemory(skills.MemoryConfig{
		MaxSkillsPerIdentity: int(c.GetMaxSkillsPerIdentity()),
		MaxVersionsPerSkill:  int(c.GetMaxVersionsPerSkill()),
		MaxBytesPerIdentity:  int64(c.GetMaxBytesPerIdentity()),
		MaxBytes:             int64(c.GetMaxBytes()),
	})
}

// skillLimits returns the limits of a bundle of cfg: the native ones, and cfg.skills's bound
// of a bundle's bytes.
func skillLimits(cfg *configv1.Config) skills.Limits {
	return skills.Limits{MaxBundleBytes: int64(cfg.GetSkills().GetMaxBundleBytes())}
}

// resolveSkills returns admission's resolver of the shell tool's container_auto skills over
// store (the Skills API's) and lim, or nil where the Skills API is not served (store nil).
func resolveSkills(store skills.Store, lim skills.Limits) func(ctx context.Context, identity string, raw []byte, param string) (*sandbox.SkillFiles, []admission.MountedSkill, error) {
	if store == nil {
		return nil
	}
	return func(ctx context.Context, identity string, raw []byte, param string) (*sandbox.SkillFiles, []admission.MountedSkill, error) {
		var entries []json.RawMessage
		if err := json.Unmarshal(raw, &entries); err != nil {
			return nil, nil, &schema.RequestError{Message: "Invalid '" + param + "': expected an array of skills.", Param: param, Code: "invalid_type"}
		}
		files, ms, err := containers.ResolveSkills(ctx, store, lim, identity, entries, param)
		if err != nil {
			return nil, nil, err
		}
		out := make([]admission.MountedSkill, 0, len(ms))
		for _, m := range ms {
			out = append(out, admission.MountedSkill{Name: m.Name, Description: m.Description,
				Path: path.Join(containers.OpenAISkillsRoot, m.Dir, skillFile(m))})
		}
		return files, out, nil
	}
}

// skillFile returns the name of m's SKILL.md as its bundle spells it ("SKILL.md" or "skill.md").
func skillFile(m skills.Mounted) string {
	for _, f := range m.Files {
		if strings.EqualFold(f.Path, "SKILL.md") {
			return f.Path
		}
	}
	return "SKILL.md"
}
