package admission

import (
	"context"
	"net/http"

	"github.com/codeinterp/codeinterp/pkg/schema"
)

// announceContainerSkills tells the model of the skills of the container the request names (a
// shell tool's container_reference, or the code_interpreter tool's container), as for a
// container_auto's: a container created with skills (POST /v1/containers) has them mounted
// wherever it is used. A request that brings skills of its own announces those instead.
func (ad *Admitted) announceContainerSkills(ctx context.Context, rq *schema.Request) *Refusal {
	sa, ok := ad.x.(schema.SkillsAnnouncer)
	if !ok || ad.a.skillsOf == nil || len(rq.Skills) > 0 || requestsSkills(ad.x) {
		return nil
	}
	ms, err := ad.a.skillsOf(ctx, ad.callerIdentity(), rq.ContainerID)
	if err != nil {
		return &Refusal{Err: &schema.RequestError{Status: http.StatusServiceUnavailable, Code: "skills_unavailable",
			Message: "codeinterp could not read the container's skills; try again."}, Details: "codeinterp_skills_unavailable", Cause: err}
	}
	if len(ms) > 0 {
		sa.AnnounceSkills(SkillsText(ms))
	}
	return nil
}
