package app

import (
	"context"
	"encoding/json"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/containers"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/skills"
	storeredis "github.com/codeinterp/codeinterp/pkg/store/redis"
)

// skillStore returns the store of the Skills API (/v1/skills) of cfg: in the single process's
// memory (store memory), or in the fleet's Redis through rc (store redis), where a skill
// uploaded through one replica is served by every other. Either is bounded per identity and
// in all by cfg.skills; in Redis, the bundles are kept zipped (see storeredis.Skills).
func skillStore(cfg *configv1.Config, rc goredis.UniversalClient) skills.Store {
	c := cfg.GetSkills()
	bounds := skills.Bounds{
		MaxSkillsPerIdentity: int(c.GetMaxSkillsPerIdentity()),
		MaxVersionsPerSkill:  int(c.GetMaxVersionsPerSkill()),
		MaxBytesPerIdentity:  int64(c.GetMaxBytesPerIdentity()),
		MaxBytes:             int64(c.GetMaxBytes()),
	}
	if cfg.GetStore() == config.StoreRedis {
		prefix := cfg.GetRedis().GetKeyPrefix()
		if prefix == "" {
			prefix = storeredis.DefaultPrefix
		}
		return storeredis.NewSkills(rc, storeredis.SkillsOptions{
			Prefix:  prefix,
			Timeout: cfg.GetRedis().GetTimeout().AsDuration(),
			Bounds:  bounds,
		})
	}
	return skills.NewMemory(skills.MemoryConfig{Bounds: bounds})
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
		return files, mountedSkills(containers.Announce(ms)), nil
	}
}

// containerSkills returns admission's look-up of the skills a container was created with
// (POST /v1/containers skills, recorded in store), or nil where the Skills API is not served.
func containerSkills(store skills.Store) func(ctx context.Context, identity, id string) ([]admission.MountedSkill, error) {
	if store == nil {
		return nil
	}
	return func(ctx context.Context, identity, id string) ([]admission.MountedSkill, error) {
		as, err := store.Attached(ctx, identity, id)
		if err != nil {
			return nil, err
		}
		return mountedSkills(as), nil
	}
}

// attachSkills returns admission's record of the skills a container_auto container was
// created with, in store (which containerSkills reads back), or nil where the Skills API is not
// served. The container works without the record: a failure is logged.
func attachSkills(store skills.Store, log *zap.Logger) func(ctx context.Context, identity, id string, ms []admission.MountedSkill) {
	if store == nil {
		return nil
	}
	return func(ctx context.Context, identity, id string, ms []admission.MountedSkill) {
		as := make([]skills.Announced, 0, len(ms))
		for _, m := range ms {
			as = append(as, skills.Announced{Name: m.Name, Description: m.Description, Path: m.Path})
		}
		if err := store.Attach(ctx, identity, id, as); err != nil {
			log.Warn("record a container's skills", zap.String("container_id", id), zap.Error(err))
		}
	}
}

func mountedSkills(as []skills.Announced) []admission.MountedSkill {
	out := make([]admission.MountedSkill, 0, len(as))
	for _, a := range as {
		out = append(out, admission.MountedSkill{Name: a.Name, Description: a.Description, Path: a.Path})
	}
	return out
}
