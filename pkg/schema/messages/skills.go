package messages

import (
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Skills of a request's container (container.skills, reference §5): custom skills, which the
// Skills API's store holds, are mounted read-only at SkillsRoot, each in a directory named as
// the skill, as natively; Anthropic's own skills (pptx, xlsx, docx, pdf) are not provided.
const (
	// MaxSkills is how many skills one request may name, as natively ("up to 8 Skills per
	// request").
	MaxSkills = 8
	// SkillsRoot is where a container's skills are mounted: /skills/<name>/.
	SkillsRoot = "/skills"
)

// Skill is one entry of a request's container.skills; after admission, Version is the
// version it resolved to, for the answer's container.skills.
type Skill struct {
	// Type is "custom" (Anthropic's own, "anthropic", are refused by Rewrite).
	Type string
	// SkillID is the skill's id in the Skills API ("skill_…").
	SkillID string
	// Version is a version, "latest", or "" for the latest.
	Version string
}

// parseSkills reads a request's container.skills (null or absent: none): at most MaxSkills,
// each {type, skill_id, version?} of type "custom". A client mistake is a *RequestError.
func parseSkills(c gjson.Result) ([]Skill, error) {
	s := c.Get("skills")
	if !s.Exists() || s.Type == gjson.Null {
		return nil, nil
	}
	if !s.IsArray() {
		return nil, badRequest("container.skills: Input should be a valid list")
	}
	entries := s.Array()
	if len(entries) > MaxSkills {
		return nil, badRequest("container.skills: List should have at most %d items after validation, not %d", MaxSkills, len(entries))
	}
	out := make([]Skill, 0, len(entries))
	for i, e := range entries {
		if !e.IsObject() {
			return nil, badRequest("container.skills.%d: Input should be a valid dictionary or object", i)
		}
		id, typ, v := e.Get("skill_id"), e.Get("type"), e.Get("version")
		switch {
		case id.Type != gjson.String || id.String() == "":
			return nil, badRequest("container.skills.%d.skill_id: Field required", i)
		case typ.Type != gjson.String:
			return nil, badRequest("container.skills.%d.type: Field required", i)
		case v.Exists() && v.Type != gjson.String && v.Type != gjson.Null:
			return nil, badRequest("container.skills.%d.version: Input should be a valid string", i)
		}
		switch typ.String() {
		case "anthropic":
			return nil, badRequest("container.skills.%d: Anthropic skills ('%s') are not provided by this gateway; only custom skills uploaded through its Skills API are.", i, id.String())
		case "custom":
		default:
			return nil, badRequest("container.skills.%d.type: Input should be 'anthropic' or 'custom'", i)
		}
		sk := Skill{Type: "custom", SkillID: id.String(), Version: v.String()}
		for _, o := range out {
			if o.SkillID == sk.SkillID {
				return nil, badRequest("container.skills.%d: skill '%s' is named twice", i, sk.SkillID)
			}
		}
		out = append(out, sk)
	}
	return out, nil
}

// skillsJSON is the answer's container.skills of ss: each one's type, id and resolved version.
func skillsJSON(ss []Skill) string {
	out := "["
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += `{"type":` + quote(s.Type) + `,"skill_id":` + quote(s.SkillID) + `,"version":` + quote(s.Version) + `}`
	}
	return out + "]"
}

// RequestedSkills returns the request's container.skills (Rewrite's), in order: each
// skill's id and version ("latest" or "" for the latest); none when it names none. Admission
// resolves them in the Skills API's store and mounts them at SkillsRoot.
func (x *exchange) RequestedSkills() (ids, versions []string) {
	for _, s := range x.rq.Skills {
		ids, versions = append(ids, s.SkillID), append(versions, s.Version)
	}
	return ids, versions
}

// SkillsRoot returns where the exchange's container mounts its skills (admission.SkillsRequester).
func (x *exchange) SkillsRoot() string { return SkillsRoot }

// ResolvedSkills is told the version each of RequestedSkills resolved to, in their order: the
// answer's container.skills echoes them.
func (x *exchange) ResolvedSkills(versions []string) {
	for i := range x.rq.Skills {
		if i < len(versions) {
			x.rq.Skills[i].Version = versions[i]
		}
	}
}

// AnnounceSkills implements [schema.SkillsAnnouncer]: text, which names the skills mounted in
// the container, is appended to the description of the first tool standing for the code
// execution tool (Python's, or bash's for code_execution_20250825), in the body sent upstream
// and in the one the follow-ups are made from.
func (x *exchange) AnnounceSkills(text string) {
	name := x.rq.Names.Python
	if x.rq.Version == Version20250825 {
		name = x.rq.Names.Bash
	}
	body := x.req.Body
	for i, t := range gjson.GetBytes(body, "tools").Array() {
		if t.Get("name").String() != name || !t.Get("input_schema").Exists() {
			continue
		}
		out, err := sjson.SetBytes(body, sprintf("tools.%d.description", i), t.Get("description").String()+text)
		if err != nil {
			return
		}
		x.req.Body, x.rq.Body, x.sent = out, out, out
		return
	}
}
