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

// ContainersRan is an exchange that tells, once its answer is made, the containers its
// request's code ran in, in order.
type ContainersRan interface {
	ContainersRan() []string
}

// attachCreated records the shell tool's container_auto skills of the request for the
// containers the loop created for it (see Config.AttachSkills), so that a later request
// naming one of them (a shell tool's container_reference, the code_interpreter tool's
// container id) tells the model of them, as for a container created with skills by POST
// /v1/containers. A container the request named, or a session's, may have been created
// without them, and an anonymous caller's containers are deleted after the reply: none of
// those is recorded.
func (ad *Admitted) attachCreated() {
	cr, ok := ad.x.(ContainersRan)
	if !ok || ad.a.attachSkills == nil || len(ad.mounted) == 0 || ad.named || ad.callerIdentity() == "" {
		return
	}
	seen := map[string]bool{}
	for _, id := range cr.ContainersRan() {
		if !seen[id] {
			seen[id] = true
			// Answered has no context: the answer is made, and the store bounds its own calls.
			ad.a.attachSkills(context.Background(), ad.callerIdentity(), id, ad.mounted)
		}
	}
}
