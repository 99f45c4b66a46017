package containers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/skills"
)

// The Skills API (/v1/skills): skills made of a zip or of separately uploaded files, their
// versions and their content, per identity, in the Config's skills.Store. A skill of another
// identity is a 404, as a container is.

// skillAPI is the Skills API's part of a Handler.
type skillAPI struct {
	store skills.Store
	lim   skills.Limits
	// uploading counts the skill uploads in progress in all, each of which holds its bundle in
	// memory until it is stored; past maxUploading one more is a 429.
	uploading    atomic.Int64
	maxUploading int64
}

func newSkillAPI(cfg Config) *skillAPI {
	if cfg.Skills == nil {
		return nil
	}
	a := &skillAPI{store: cfg.Skills, lim: cfg.SkillLimits, maxUploading: int64(cfg.MaxSkillUploads)}
	if a.maxUploading <= 0 {
		a.maxUploading = 4
	}
	return a
}

// skillRoutes adds the Skills API's routes under prefix.
func (h *Handler) skillRoutes(prefix string) {
	if h.skills == nil {
		return
	}
	base := prefix + "/v1/skills"
	h.mux.HandleFunc("POST "+base, h.skillRoute(prefix, h.createSkill, h.askCreateSkill))
	h.mux.HandleFunc("GET "+base, h.skillRoute(prefix, h.listSkills, h.askListSkills))
	h.mux.HandleFunc("GET "+base+"/{id}", h.skillRoute(prefix, h.getSkill, h.askGetSkill))
	h.mux.HandleFunc("POST "+base+"/{id}", h.skillRoute(prefix, h.updateSkill, nil))
	h.mux.HandleFunc("DELETE "+base+"/{id}", h.skillRoute(prefix, h.deleteSkill, h.askDeleteSkill))
	h.mux.HandleFunc("GET "+base+"/{id}/content", h.skillRoute(prefix, h.skillContent, nil))
	h.mux.HandleFunc("POST "+base+"/{id}/versions", h.skillRoute(prefix, h.createSkillVersion, h.askCreateVersion))
	h.mux.HandleFunc("GET "+base+"/{id}/versions", h.skillRoute(prefix, h.listSkillVersions, h.askListVersions))
	h.mux.HandleFunc("GET "+base+"/{id}/versions/{version}", h.skillRoute(prefix, h.getSkillVersion, h.askGetVersion))
	h.mux.HandleFunc("DELETE "+base+"/{id}/versions/{version}", h.skillRoute(prefix, h.deleteSkillVersion, h.askDeleteVersion))
	h.mux.HandleFunc("GET "+base+"/{id}/versions/{version}/content", h.skillRoute(prefix, h.skillContent, nil))
}

type skillJSON struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Name           string `json:"name"`
	Description    string `json:"description"`
	CreatedAt      int64  `json:"created_at"`
	DefaultVersion string `json:"default_version"`
	LatestVersion  string `json:"latest_version"`
}

func toSkillJSON(s skills.Skill) skillJSON {
	return skillJSON{ID: s.ID, Object: "skill", Name: s.Name, Description: s.Description, CreatedAt: s.CreatedAt.Unix(),
		DefaultVersion: s.DefaultVersion, LatestVersion: s.LatestVersion}
}

type skillVersionJSON struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	SkillID     string `json:"skill_id"`
	Version     string `json:"version"`
	Name        string `json:"name"`
	Description string `json:"description"`
	CreatedAt   int64  `json:"created_at"`
}

func toVersionJSON(v skills.Version) skillVersionJSON {
	return skillVersionJSON{ID: v.ID, Object: "skill.version", SkillID: v.SkillID, Version: v.Version, Name: v.Name,
		Description: v.Description, CreatedAt: v.CreatedAt.Unix()}
}

// skillFail answers err of a Skills API call.
func (h *Handler) skillFail(c call, what string, err error) {
	var inv *skills.InvalidError
	switch {
	case errors.As(err, &inv) && inv.TooLarge:
		writeError(c.w, &schema.RequestError{Status: http.StatusRequestEntityTooLarge, Message: inv.Message, Param: inv.Param, Code: "file_too_large"})
	case errors.As(err, &inv):
		writeError(c.w, &schema.RequestError{Message: inv.Message, Param: inv.Param, Code: "invalid_value"})
	case errors.Is(err, skills.ErrNotFound):
		writeError(c.w, &schema.RequestError{Status: http.StatusNotFound, Message: what + " not found.", Code: "not_found"})
	case errors.Is(err, skills.ErrFull):
		writeError(c.w, &schema.RequestError{Status: http.StatusTooManyRequests, Code: "too_many_skills",
			Message: "No more skills or skill versions can be kept for this API key now: delete one first."})
	case errors.Is(err, skills.ErrDefaultVersion):
		writeError(c.w, &schema.RequestError{Message: "The default version of a skill cannot be deleted: make another version the default first.",
			Param: "version", Code: "invalid_value"})
	default:
		h.fail(c, what, err)
	}
}

// readBundle reads the multipart body of a create call: its files (one zip, or the files of a
// folder, each named "<folder>/<path>"), its field default, and its field display_name (nil when
// absent; Anthropic's shape).
func (h *Handler) readBundle(c call) (*skills.Bundle, bool, *string, error) {
	mr, err := c.r.MultipartReader()
	if err != nil {
		return nil, false, nil, &schema.RequestError{Message: "Expected a multipart/form-data body with the skill's 'files'.", Param: "files", Code: "invalid_multipart"}
	}
	var (
		zipped  *skills.Bundle
		builder *skills.Builder
		makeDef bool
		display *string
		fields  int
	)
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, nil, &SourceError{Err: err}
		}
		if fields++; fields > 2*skills.MaxFiles {
			return nil, false, nil, &schema.RequestError{Message: "The multipart body has too many parts.", Param: "files", Code: "invalid_multipart"}
		}
		switch part.FormName() {
		case "default":
			v, err := io.ReadAll(io.LimitReader(part, 16))
			if err != nil {
				return nil, false, nil, &SourceError{Err: err}
			}
			if makeDef, err = strconv.ParseBool(strings.TrimSpace(string(v))); err != nil {
				return nil, false, nil, &schema.RequestError{Message: "Invalid 'default': expected true or false.", Param: "default", Code: "invalid_value"}
			}
		case "display_name":
			v, err := io.ReadAll(io.LimitReader(part, 1024))
			if err != nil {
				return nil, false, nil, &SourceError{Err: err}
			}
			d := string(v)
			display = &d
		case "files", "files[]":
			name := rawFileName(part.Header.Get("Content-Disposition"))
			br := bufio.NewReader(part)
			head, _ := br.Peek(4)
			isZip := builder == nil && zipped == nil &&
				(bytes.HasPrefix(head, []byte("PK\x03\x04")) || bytes.HasPrefix(head, []byte("PK\x05\x06")) || strings.HasSuffix(strings.ToLower(name), ".zip"))
			switch {
			case zipped != nil:
				return nil, false, nil, &schema.RequestError{Message: "Upload one skill zip, or the files of one skill folder, not both.", Param: "files", Code: "invalid_value"}
			case isZip:
				if zipped, err = skills.ReadZip(br, h.skills.lim); err != nil {
					return nil, false, nil, sourceErr(err)
				}
			default:
				if builder == nil {
					builder = skills.NewBuilder(h.skills.lim)
				}
				if err := builder.Add(name, br); err != nil {
					return nil, false, nil, sourceErr(err)
				}
			}
		default:
			// Unknown fields are read past, as the Files API's are.
			if _, err := io.Copy(io.Discard, io.LimitReader(part, maxJSONBody)); err != nil {
				return nil, false, nil, &SourceError{Err: err}
			}
		}
	}
	switch {
	case zipped != nil:
		return zipped, makeDef, display, nil
	case builder != nil:
		b, err := builder.Bundle()
		return b, makeDef, display, err
	default:
		return nil, false, nil, &schema.RequestError{Message: "Missing required parameter: 'files'.", Param: "files", Code: "missing_required_parameter"}
	}
}

// sourceErr returns err of a bundle's reading as the API maps it: a refused bundle as it is,
// an error of the body's reading as a SourceError.
func sourceErr(err error) error {
	var inv *skills.InvalidError
	if errors.As(err, &inv) {
		return err
	}
	return &SourceError{Err: err}
}

// rawFileName is the filename of a part's Content-Disposition as sent, folders included
// (mime/multipart's FileName keeps only the base name).
func rawFileName(disposition string) string {
	_, params, err := mime.ParseMediaType(disposition)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// beginSkillUpload counts an upload of c's identity and in all; it answers c and reports
// false when there are too many.
func (h *Handler) beginSkillUpload(c call) bool {
	if !h.beginUpload(c.identity) {
		h.tooManyUploads(c)
		return false
	}
	if h.skills.uploading.Add(1) > h.skills.maxUploading {
		h.endSkillUpload(c)
		writeError(c.w, &schema.RequestError{Status: http.StatusTooManyRequests, Code: "too_many_uploads",
			Message: "Too many skill uploads are in progress on the server: try again shortly."})
		return false
	}
	return true
}

func (h *Handler) endSkillUpload(c call) {
	h.skills.uploading.Add(-1)
	h.endUpload(c.identity)
}

func (h *Handler) createSkill(c call) {
	if !h.beginSkillUpload(c) {
		return
	}
	defer h.endSkillUpload(c)
	b, _, _, err := h.readBundle(c)
	if err != nil {
		h.skillFail(c, "Skill", err)
		return
	}
	s, err := h.skills.store.Create(c.r.Context(), c.identity, b)
	if err != nil {
		h.skillFail(c, "Skill", err)
		return
	}
	writeJSON(c.w, toSkillJSON(s))
}

func (h *Handler) createSkillVersion(c call) {
	if !h.beginSkillUpload(c) {
		return
	}
	defer h.endSkillUpload(c)
	id := c.r.PathValue("id")
	// A skill that is not there is a 404 before its body is read.
	if _, err := h.skills.store.Get(c.r.Context(), c.identity, id); err != nil {
		h.skillFail(c, "Skill", err)
		return
	}
	b, makeDef, _, err := h.readBundle(c)
	if err != nil {
		h.skillFail(c, "Skill", err)
		return
	}
	v, err := h.skills.store.AddVersion(c.r.Context(), c.identity, id, b, makeDef)
	if err != nil {
		h.skillFail(c, "Skill", err)
		return
	}
	writeJSON(c.w, toVersionJSON(v))
}

func (h *Handler) listSkills(c call) {
	p, err := readPage(c.r)
	if err != nil {
		h.fail(c, "", err)
		return
	}
	all, err := h.skills.store.List(c.r.Context(), c.identity)
	if err != nil {
		h.skillFail(c, "Skill", err)
		return
	}
	items, hasMore, err := page(p, all, func(s skills.Skill) (time.Time, string) { return s.CreatedAt, s.ID })
	if err != nil {
		h.fail(c, "", err)
		return
	}
	data := make([]skillJSON, len(items))
	for i, s := range items {
		data[i] = toSkillJSON(s)
	}
	writeJSON(c.w, listJSON(data, hasMore, func(v skillJSON) string { return v.ID }))
}

func (h *Handler) getSkill(c call) {
	s, err := h.skills.store.Get(c.r.Context(), c.identity, c.r.PathValue("id"))
	if err != nil {
		h.skillFail(c, "Skill", err)
		return
	}
	writeJSON(c.w, toSkillJSON(s))
}

// updateSkill sets the skill's default version: {"default_version": "2"}.
func (h *Handler) updateSkill(c call) {
	var body struct {
		DefaultVersion *string `json:"default_version"`
	}
	if err := decodeJSON(c.r, &body); err != nil {
		h.fail(c, "", err)
		return
	}
	if body.DefaultVersion == nil {
		h.fail(c, "", &schema.RequestError{Message: "Missing required parameter: 'default_version'.", Param: "default_version", Code: "missing_required_parameter"})
		return
	}
	s, err := h.skills.store.SetDefault(c.r.Context(), c.identity, c.r.PathValue("id"), *body.DefaultVersion)
	if err != nil {
		h.skillFail(c, "Skill version", err)
		return
	}
	writeJSON(c.w, toSkillJSON(s))
}

func (h *Handler) deleteSkill(c call) {
	id := c.r.PathValue("id")
	if err := h.skills.store.Delete(c.r.Context(), c.identity, id); err != nil {
		h.skillFail(c, "Skill", err)
		return
	}
	writeJSON(c.w, deletedJSON{ID: id, Object: "skill.deleted", Deleted: true})
}

func (h *Handler) listSkillVersions(c call) {
	p, err := readPage(c.r)
	if err != nil {
		h.fail(c, "", err)
		return
	}
	all, err := h.skills.store.Versions(c.r.Context(), c.identity, c.r.PathValue("id"))
	if err != nil {
		h.skillFail(c, "Skill", err)
		return
	}
	// Versions sort by number, which follows their creation (versions made in the same second
	// keep their order).
	items, hasMore, err := page(p, all, func(v skills.Version) (time.Time, string) {
		n, _ := strconv.ParseInt(v.Version, 10, 64)
		return time.Unix(n, 0), v.ID
	})
	if err != nil {
		h.fail(c, "", err)
		return
	}
	data := make([]skillVersionJSON, len(items))
	for i, v := range items {
		data[i] = toVersionJSON(v)
	}
	writeJSON(c.w, listJSON(data, hasMore, func(v skillVersionJSON) string { return v.ID }))
}

func (h *Handler) getSkillVersion(c call) {
	v, err := h.skills.store.Version(c.r.Context(), c.identity, c.r.PathValue("id"), c.r.PathValue("version"))
	if err != nil {
		h.skillFail(c, "Skill version", err)
		return
	}
	writeJSON(c.w, toVersionJSON(v))
}

func (h *Handler) deleteSkillVersion(c call) {
	id, version := c.r.PathValue("id"), c.r.PathValue("version")
	v, err := h.skills.store.Version(c.r.Context(), c.identity, id, version)
	if err == nil {
		err = h.skills.store.DeleteVersion(c.r.Context(), c.identity, id, version)
	}
	if err != nil {
		h.skillFail(c, "Skill version", err)
		return
	}
	writeJSON(c.w, struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Deleted bool   `json:"deleted"`
		Version string `json:"version"`
	}{ID: v.ID, Object: "skill.version.deleted", Deleted: true, Version: v.Version})
}

// skillContent downloads a version's bundle (the default version's on /content) as a zip of
// one folder named after the skill.
func (h *Handler) skillContent(c call) {
	b, v, err := h.skills.store.Bundle(c.r.Context(), c.identity, c.r.PathValue("id"), c.r.PathValue("version"))
	if err != nil {
		h.skillFail(c, "Skill", err)
		return
	}
	c.w.Header().Set("Content-Type", "application/zip")
	c.w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-%s.zip"`, b.Name, v.Version))
	if err := b.Zip(c.w, b.Name); err != nil && c.r.Context().Err() == nil {
		h.log.Warn("write a skill's content", zap.Error(err))
	}
}

// OpenAISkillsRoot is where a container's skills are mounted, each in "<name>-<32 hex>", as in
// OpenAI's containers.
const OpenAISkillsRoot = "/home/oai/skills"

// maxContainerSkills bounds the skills of one container (OpenAI's own bound is not published).
const maxContainerSkills = 20

// skillEntry is one of a create body's skills: a skill_reference or an inline bundle.
type skillEntry struct {
	Type    string          `json:"type"`
	SkillID *string         `json:"skill_id"`
	Version json.RawMessage `json:"version"`
	Name    *string         `json:"name"`
	Desc    *string         `json:"description"`
	Source  *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"source"`
}

// ParseSkillRefs reads the OpenAI skills entries raw (param names their array: "skills",
// "tools[0].environment.skills") into refs; a malformed entry is a *schema.RequestError.
func ParseSkillRefs(raw []json.RawMessage, param string) ([]skills.Ref, error) {
	if len(raw) > maxContainerSkills {
		return nil, &schema.RequestError{Message: fmt.Sprintf("Invalid '%s': at most %d skills.", param, maxContainerSkills),
			Param: param, Code: "array_above_max_length"}
	}
	refs := make([]skills.Ref, 0, len(raw))
	for i, r := range raw {
		p := fmt.Sprintf("%s[%d]", param, i)
		var e skillEntry
		if err := json.Unmarshal(r, &e); err != nil {
			return nil, &schema.RequestError{Message: fmt.Sprintf("Invalid '%s': expected a skill_reference or an inline skill.", p), Param: p, Code: "invalid_type"}
		}
		missing := func(f string) error {
			return &schema.RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.%s'.", p, f), Param: p + "." + f, Code: "missing_required_parameter"}
		}
		switch e.Type {
		case "skill_reference":
			if e.SkillID == nil || *e.SkillID == "" {
				return nil, missing("skill_id")
			}
			ref := skills.Ref{SkillID: *e.SkillID, Param: p}
			if len(e.Version) > 0 && string(e.Version) != "null" {
				var n int64
				var s string
				switch {
				case json.Unmarshal(e.Version, &n) == nil && n > 0:
					ref.Version = strconv.FormatInt(n, 10)
				case json.Unmarshal(e.Version, &s) == nil && s != "":
					ref.Version = s
				default:
					return nil, &schema.RequestError{Message: fmt.Sprintf("Invalid '%s.version': expected a positive integer or 'latest'.", p), Param: p + ".version", Code: "invalid_value"}
				}
			}
			refs = append(refs, ref)
		case "inline":
			switch {
			case e.Name == nil:
				return nil, missing("name")
			case e.Desc == nil:
				return nil, missing("description")
			case e.Source == nil:
				return nil, missing("source")
			}
			if e.Source.Type != "base64" || e.Source.MediaType != "application/zip" {
				return nil, &schema.RequestError{Message: fmt.Sprintf("Invalid '%s.source': expected type 'base64' with media_type 'application/zip'.", p), Param: p + ".source", Code: "invalid_value"}
			}
			data, err := base64.StdEncoding.DecodeString(e.Source.Data)
			if err != nil {
				return nil, &schema.RequestError{Message: fmt.Sprintf("Invalid '%s.source.data': not base64.", p), Param: p + ".source.data", Code: "invalid_value"}
			}
			refs = append(refs, skills.Ref{Zip: data, Param: p})
		case "":
			return nil, missing("type")
		default:
			return nil, &schema.RequestError{Message: fmt.Sprintf("Invalid '%s.type': expected 'skill_reference' or 'inline', got '%s'.", p, e.Type), Param: p + ".type", Code: "invalid_value"}
		}
	}
	return refs, nil
}

// ResolveSkills turns the skills entries raw of identity into the files of a container (nil
// when raw is empty) and what each skill is: stored skills come from store (nil: none), inline
// ones are read with lim. A client's mistake is a *schema.RequestError (400).
func ResolveSkills(ctx context.Context, store skills.Store, lim skills.Limits, identity string, raw []json.RawMessage, param string) (*sandbox.SkillFiles, []skills.Mounted, error) {
	if len(raw) == 0 {
		return nil, nil, nil
	}
	refs, err := ParseSkillRefs(raw, param)
	if err != nil {
		return nil, nil, err
	}
	ms, err := skills.Resolve(ctx, store, lim, identity, refs, true)
	if inv, ok := errors.AsType[*skills.InvalidError](err); ok {
		re := &schema.RequestError{Message: inv.Message, Param: inv.Param, Code: "invalid_value"}
		if inv.TooLarge {
			re.Status, re.Code = http.StatusRequestEntityTooLarge, "file_too_large"
		}
		return nil, nil, re
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: skills: %w", ErrUnavailable, err)
	}
	files := skills.MountFiles(OpenAISkillsRoot, ms)
	if err := files.Check(); err != nil {
		return nil, nil, &schema.RequestError{Message: fmt.Sprintf("Invalid '%s': %s.", param, err), Param: param, Code: "invalid_value"}
	}
	return files, ms, nil
}

// Announce returns what the model is told of the skills ms mounted at OpenAISkillsRoot: each
// one's name, description and the path of its SKILL.md (as its bundle spells it).
func Announce(ms []skills.Mounted) []skills.Announced {
	out := make([]skills.Announced, 0, len(ms))
	for _, m := range ms {
		md := "SKILL.md"
		for _, f := range m.Files {
			if strings.EqualFold(f.Path, "SKILL.md") {
				md = f.Path
			}
		}
		out = append(out, skills.Announced{Name: m.Name, Description: m.Description, Path: path.Join(OpenAISkillsRoot, m.Dir, md)})
	}
	return out
}

// attachSkills records the skills ms of the container id just created, which a request
// naming the container (a shell tool's container_reference) then tells the model of. The
// container works without the record: a failure is logged, and the model is not told.
func (h *Handler) attachSkills(c call, id string, ms []skills.Mounted) {
	store, _ := h.skillStore()
	if store == nil || len(ms) == 0 {
		return
	}
	if err := store.Attach(context.WithoutCancel(c.r.Context()), c.identity, id, Announce(ms)); err != nil {
		h.log.Warn("record a container's skills", zap.String("container_id", id), zap.Error(err))
	}
}

// skillStore is the Handler's skills store, nil without the Skills API.
func (h *Handler) skillStore() (skills.Store, skills.Limits) {
	if h.skills == nil {
		return nil, h.cfg.SkillLimits
	}
	return h.skills.store, h.skills.lim
}
