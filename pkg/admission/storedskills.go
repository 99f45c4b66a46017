package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/skills"
)

// SkillsRequester is an Exchange whose request names, by id, skills of the Skills API's store
// for its container (the Messages API's container.skills). Admission resolves them for the
// caller's identity, mounts each read-only at SkillsRoot()/<name>/, tells the model of them
// (schema.SkillsAnnouncer) and tells the exchange the versions they resolved to.
type SkillsRequester interface {
	// RequestedSkills returns each skill's id and version (a version, or "latest" or "" for
	// the latest), in the request's order; none when it names none.
	RequestedSkills() (ids, versions []string)
	// SkillsRoot is where the container mounts them ("/skills").
	SkillsRoot() string
	// ResolvedSkills is told the version each requested skill resolved to, in order.
	ResolvedSkills(versions []string)
}

// requestsSkills reports whether x's request names skills of its own (SkillsRequester): the
// model is told of those rather than of the named container's.
func requestsSkills(x schema.Exchange) bool {
	sr, ok := x.(SkillsRequester)
	if !ok {
		return false
	}
	ids, _ := sr.RequestedSkills()
	return len(ids) > 0
}

// mountRequestedSkills resolves the skills x requests (see SkillsRequester) into the files its
// container mounts. An unknown skill or version is a 400 naming the entry; no store (the Skills
// API off) refuses any.
func (ad *Admitted) mountRequestedSkills(ctx context.Context) *Refusal {
	sr, ok := ad.x.(SkillsRequester)
	if !ok {
		return nil
	}
	ids, versions := sr.RequestedSkills()
	if len(ids) == 0 {
		return nil
	}
	invalid := func(msg string) *Refusal {
		return &Refusal{Err: &schema.RequestError{Message: msg, Param: "container.skills", Code: "invalid_value"}, Details: "codeinterp_invalid_request"}
	}
	store := ad.a.skillStore
	if store == nil {
		return invalid("container.skills: custom skills are not served by this gateway (its Skills API is off).")
	}
	root := sr.SkillsRoot()
	ms := make([]skills.Mounted, 0, len(ids))
	told := make([]MountedSkill, 0, len(ids))
	resolved := make([]string, 0, len(ids))
	for i, id := range ids {
		v := versions[i]
		if v == "" {
			v = "latest" // natively the version defaults to the most recent
		}
		b, ver, err := store.Bundle(ctx, ad.callerIdentity(), id, v)
		switch {
		case errors.Is(err, skills.ErrNotFound) && v != "latest":
			return invalid(fmt.Sprintf("container.skills.%d.version: skill '%s' has no version '%s'.", i, id, v))
		case errors.Is(err, skills.ErrNotFound):
			return invalid(fmt.Sprintf("container.skills.%d.skill_id: skill '%s' not found.", i, id))
		case err != nil:
			return &Refusal{Err: &schema.RequestError{Status: http.StatusServiceUnavailable, Code: "skills_unavailable",
				Message: "codeinterp could not read the request's skills; try again."}, Details: "codeinterp_skills_unavailable", Cause: err}
		}
		for _, m := range ms {
			if m.Dir == b.Name {
				return invalid(fmt.Sprintf("container.skills.%d: skill '%s' is named '%s' as another of the request's skills; each is mounted at %s/<name>.", i, id, b.Name, root))
			}
		}
		ms = append(ms, skills.Mounted{Name: b.Name, Description: b.Description, Dir: b.Name, Files: b.Files})
		md := "SKILL.md"
		for _, f := range b.Files {
			if strings.EqualFold(f.Path, "SKILL.md") {
				md = f.Path
			}
		}
		told = append(told, MountedSkill{Name: b.Name, Description: b.Description, Path: path.Join(root, b.Name, md)})
		resolved = append(resolved, ver.Epoch) // "a skill version ID for custom skills", as natively
	}
	files := skills.MountFiles(root, ms)
	if err := files.Check(); err != nil {
		return invalid(fmt.Sprintf("container.skills: %s.", err))
	}
	ad.skills = files
	sr.ResolvedSkills(resolved)
	if sa, ok := ad.x.(schema.SkillsAnnouncer); ok {
		sa.AnnounceSkills(SkillsText(told))
	}
	return nil
}
