package app

import (
	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
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
