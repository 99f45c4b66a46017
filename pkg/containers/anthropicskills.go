package containers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/skills"
)

// Anthropic's Skills API on the same /v1/skills paths: a call carrying anthropic-version (which
// Anthropic's SDKs always send) is answered in Anthropic's shapes (Skill, SkillVersion,
// DeletedSkill, PageCursor lists, errors as {"type":"error","error":{…}}), over the same store,
// bounds and identity as OpenAI's shape, so a skill made through either is one that Messages'
// container.skills and Responses' skill_reference both name. A version's id is its Epoch, as
// Anthropic's are (microseconds since the Unix epoch, "1759178010641129"); it is addressed by
// that id, "latest", or its number in OpenAI's shape ("1", "2", …). A version created this way
// becomes the skill's default, so that the default (what OpenAI's shape mounts) and "latest"
// (what Anthropic's does) stay the same skill. A skill's display_name is the one it was created
// with, or its latest version's SKILL.md name.

// isAnthropic reports whether r asks for Anthropic's shapes.
func isAnthropic(r *http.Request) bool { return r.Header.Get("anthropic-version") != "" }

// skillRoute serves a /v1/skills route in OpenAI's shape with openai, or in Anthropic's with
// ask when the call carries anthropic-version (a route Anthropic's API lacks, ask nil, is then
// a 404 in Anthropic's shape).
func (h *Handler) skillRoute(prefix string, openai func(c call), ask func(c call)) http.HandlerFunc {
	o := h.scoped(prefix, openai)
	var a http.HandlerFunc
	if ask != nil {
		a = h.askScoped(prefix, ask)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !isAnthropic(r):
			o(w, r)
		case a == nil:
			writeAnthropicError(w, http.StatusNotFound, fmt.Sprintf("Not found: %s %s", r.Method, r.URL.Path))
		default:
			a(w, r)
		}
	}
}

// askScoped is scoped for Anthropic's shapes: the same identity and check, errors as
// Anthropic's.
func (h *Handler) askScoped(prefix string, fn func(c call)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		identity, ok := anthropicCaller(&h.cfg, h.log, w, r)
		if !ok {
			return
		}
		r.Body = newIdleBody(w, r.Body, h.cfg.UploadIdle)
		fn(call{w: w, r: r, identity: identity, prefix: prefix})
	}
}

// askSkillJSON is Anthropic's Skill.
type askSkillJSON struct {
	ID              string `json:"id"`
	Type            string `json:"type"`
	DisplayName     string `json:"display_name"`
	LatestVersionID string `json:"latest_version_id"`
	Source          struct {
		Type string `json:"type"`
	} `json:"source"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
}

// askVersionJSON is Anthropic's SkillVersion.
type askVersionJSON struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	SkillID     string `json:"skill_id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	CreatedAt   string `json:"created_at"`
}

func askTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func toAskVersion(v skills.Version) askVersionJSON {
	return askVersionJSON{ID: v.Epoch, Type: "skill_version", SkillID: v.SkillID, Name: v.Name, Description: v.Description,
		CreatedAt: askTime(v.CreatedAt)}
}

// askSkill is s in Anthropic's shape: with the display_name it was created with, else (a skill
// created in OpenAI's shape, which takes none) named after its latest version's SKILL.md;
// updated when that version was made.
func (h *Handler) askSkill(ctx context.Context, identity string, s skills.Skill) (askSkillJSON, error) {
	v, err := h.skills.store.Version(ctx, identity, s.ID, "latest")
	if err != nil {
		return askSkillJSON{}, err
	}
	display := s.DisplayName
	if display == "" {
		display = v.Name
	}
	j := askSkillJSON{ID: s.ID, Type: "skill", DisplayName: display, LatestVersionID: v.Epoch,
		CreatedAt: askTime(s.CreatedAt), UpdatedAt: askTime(v.CreatedAt)}
	j.Source.Type = "custom"
	return j, nil
}

// askFail answers err of an Anthropic-shaped Skills API call; errors that are not the client's
// go to the log, and the client reads a fixed text.
func (h *Handler) askFail(c call, what, id string, err error) {
	var (
		inv *skills.InvalidError
		re  *schema.RequestError
		mbe *http.MaxBytesError
		se  *SourceError
	)
	switch {
	case errors.As(err, &inv) && inv.TooLarge:
		writeAnthropicError(c.w, http.StatusRequestEntityTooLarge, inv.Param+": "+inv.Message)
	case errors.As(err, &inv):
		writeAnthropicError(c.w, http.StatusBadRequest, inv.Param+": "+inv.Message)
	case errors.As(err, &re):
		writeAnthropicError(c.w, re.HTTPStatus(), re.Message)
	case errors.Is(err, skills.ErrNotFound):
		writeAnthropicError(c.w, http.StatusNotFound, fmt.Sprintf("%s not found: %s", what, id))
	case errors.Is(err, skills.ErrFull):
		writeAnthropicError(c.w, http.StatusTooManyRequests, "No more skills or skill versions can be kept for this API key now: delete one first.")
	case errors.As(err, &mbe):
		writeAnthropicError(c.w, http.StatusRequestEntityTooLarge, "The skill upload is too large.")
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.w.Header().Set("Connection", "close")
		writeAnthropicError(c.w, http.StatusRequestTimeout, fmt.Sprintf("The request body stalled: no byte arrived for %s.", h.cfg.UploadIdle))
	case c.r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
	case errors.As(err, &se):
		writeAnthropicError(c.w, http.StatusBadRequest, "The multipart body cannot be read: it is malformed or was cut short.")
	default:
		h.log.Warn("skills API call failed", zap.String("method", c.r.Method), zap.Error(err))
		writeAnthropicError(c.w, http.StatusInternalServerError, "The skill operation failed on the server.")
	}
}

// askBeginUpload is beginSkillUpload answering in Anthropic's shape.
func (h *Handler) askBeginUpload(c call) bool {
	if !h.beginUpload(c.identity) {
		writeAnthropicError(c.w, http.StatusTooManyRequests, "Too many uploads are in progress for this API key: try again when one has finished.")
		return false
	}
	if h.skills.uploading.Add(1) > h.skills.maxUploading {
		h.endSkillUpload(c)
		writeAnthropicError(c.w, http.StatusTooManyRequests, "Too many skill uploads are in progress on the server: try again shortly.")
		return false
	}
	return true
}

// askReadBundle reads a create body (files[], display_name): display_name, checked
// (skills.CheckDisplayName), is the bundle's DisplayName when create, SKILL.md's name when
// omitted (fixed then, as natively), and ignored for a new version (a skill keeps the label it
// was created with).
func (h *Handler) askReadBundle(c call, create bool) (*skills.Bundle, error) {
	b, _, display, err := h.readBundle(c)
	if err != nil {
		return nil, err
	}
	if !create {
		return b, nil
	}
	name := b.Name
	if display != nil {
		name = *display
	}
	if b.DisplayName, err = skills.CheckDisplayName(name); err != nil {
		return nil, err
	}
	return b, nil
}

func (h *Handler) askCreateSkill(c call) {
	if !h.askBeginUpload(c) {
		return
	}
	defer h.endSkillUpload(c)
	b, err := h.askReadBundle(c, true)
	if err != nil {
		h.askFail(c, "Skill", "", err)
		return
	}
	s, err := h.skills.store.Create(c.r.Context(), c.identity, b)
	if err != nil {
		h.askFail(c, "Skill", "", err)
		return
	}
	j, err := h.askSkill(c.r.Context(), c.identity, s)
	if err != nil {
		h.askFail(c, "Skill", s.ID, err)
		return
	}
	writeJSON(c.w, j)
}

func (h *Handler) askGetSkill(c call) {
	id := c.r.PathValue("id")
	s, err := h.skills.store.Get(c.r.Context(), c.identity, id)
	if err == nil {
		var j askSkillJSON
		if j, err = h.askSkill(c.r.Context(), c.identity, s); err == nil {
			writeJSON(c.w, j)
			return
		}
	}
	h.askFail(c, "Skill", id, err)
}

func (h *Handler) askDeleteSkill(c call) {
	id := c.r.PathValue("id")
	if err := h.skills.store.Delete(c.r.Context(), c.identity, id); err != nil {
		h.askFail(c, "Skill", id, err)
		return
	}
	writeJSON(c.w, struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}{ID: id, Type: "skill_deleted"})
}

// askPage is a list call's page and limit (1–1000, 20 by default).
func askPage(r *http.Request) (page string, limit int, err error) {
	q := r.URL.Query()
	page, limit = q.Get("page"), 20
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return "", 0, &schema.RequestError{Message: "limit: Input should be an integer from 1 to 1000"}
		}
		limit = n
	}
	if page != "" {
		if _, _, ok := parseCursor(page); !ok {
			return "", 0, &schema.RequestError{Message: "page: invalid page cursor"}
		}
	}
	return page, limit, nil
}

// pageOf returns the items of all (sorted by key: created_at, then id, the newest first) after
// the cursor page, at most limit of them, and the next page's cursor ("" for none).
func pageOf[T any](all []T, page string, limit int, key func(T) (time.Time, string)) ([]T, string) {
	newer := func(a, b T) int {
		ta, ia := key(a)
		tb, ib := key(b)
		if c := tb.Compare(ta); c != 0 {
			return c
		}
		return cmp.Compare(ib, ia)
	}
	slices.SortFunc(all, newer)
	if page != "" {
		// The cursor is the last item of the page before: what follows it in the order.
		at, id, _ := parseCursor(page)
		i := 0
		for i < len(all) {
			t, x := key(all[i])
			if t.Before(at) || (t.Equal(at) && x < id) {
				break
			}
			i++
		}
		all = all[i:]
	}
	if len(all) <= limit {
		return all, ""
	}
	t, id := key(all[limit-1])
	return all[:limit], cursor(t, id)
}

type askListJSON[T any] struct {
	Data     []T     `json:"data"`
	NextPage *string `json:"next_page"`
}

func askList[T any](data []T, next string) askListJSON[T] {
	l := askListJSON[T]{Data: data}
	if next != "" {
		l.NextPage = &next
	}
	return l
}

// askListSkills is GET /v1/skills?page&limit&source: the caller's skills, the newest first; all
// of them are "custom", so another source lists none.
func (h *Handler) askListSkills(c call) {
	page, limit, err := askPage(c.r)
	if err != nil {
		h.askFail(c, "", "", err)
		return
	}
	var all []skills.Skill
	if src := c.r.URL.Query().Get("source"); src == "" || src == "custom" {
		if all, err = h.skills.store.List(c.r.Context(), c.identity); err != nil {
			h.askFail(c, "Skill", "", err)
			return
		}
	}
	items, next := pageOf(all, page, limit, func(s skills.Skill) (time.Time, string) { return s.CreatedAt, s.ID })
	data := make([]askSkillJSON, 0, len(items))
	for _, s := range items {
		j, err := h.askSkill(c.r.Context(), c.identity, s)
		if errors.Is(err, skills.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			h.askFail(c, "Skill", s.ID, err)
			return
		}
		data = append(data, j)
	}
	writeJSON(c.w, askList(data, next))
}

func (h *Handler) askCreateVersion(c call) {
	if !h.askBeginUpload(c) {
		return
	}
	defer h.endSkillUpload(c)
	id := c.r.PathValue("id")
	if _, err := h.skills.store.Get(c.r.Context(), c.identity, id); err != nil {
		h.askFail(c, "Skill", id, err)
		return
	}
	b, err := h.askReadBundle(c, false)
	if err != nil {
		h.askFail(c, "Skill", id, err)
		return
	}
	v, err := h.skills.store.AddVersion(c.r.Context(), c.identity, id, b, true)
	if err != nil {
		h.askFail(c, "Skill", id, err)
		return
	}
	writeJSON(c.w, toAskVersion(v))
}

// versionKey orders versions by their ids, the microseconds they were made at (each later than
// the one before: skills.NextEpoch).
func versionKey(v skills.Version) (time.Time, string) {
	n, _ := strconv.ParseInt(v.Epoch, 10, 64)
	return time.UnixMicro(n), v.Epoch
}

func (h *Handler) askListVersions(c call) {
	page, limit, err := askPage(c.r)
	if err != nil {
		h.askFail(c, "", "", err)
		return
	}
	id := c.r.PathValue("id")
	all, err := h.skills.store.Versions(c.r.Context(), c.identity, id)
	if err != nil {
		h.askFail(c, "Skill", id, err)
		return
	}
	items, next := pageOf(all, page, limit, versionKey)
	data := make([]askVersionJSON, len(items))
	for i, v := range items {
		data[i] = toAskVersion(v)
	}
	writeJSON(c.w, askList(data, next))
}

func (h *Handler) askGetVersion(c call) {
	id, version := c.r.PathValue("id"), c.r.PathValue("version")
	v, err := h.skills.store.Version(c.r.Context(), c.identity, id, version)
	if err != nil {
		h.askFail(c, "Skill version", id+"/"+version, err)
		return
	}
	writeJSON(c.w, toAskVersion(v))
}

// askDeleteVersion deletes a version; the default one (the latest, for skills made in this
// shape) is deleted too, the newest other version becoming the default.
func (h *Handler) askDeleteVersion(c call) {
	ctx := c.r.Context()
	id, version := c.r.PathValue("id"), c.r.PathValue("version")
	v, err := h.skills.store.Version(ctx, c.identity, id, version)
	if err == nil {
		err = h.skills.store.DeleteVersion(ctx, c.identity, id, v.Version)
		if errors.Is(err, skills.ErrDefaultVersion) {
			err = h.moveDefault(ctx, c.identity, id, v.Version)
			if err == nil {
				err = h.skills.store.DeleteVersion(ctx, c.identity, id, v.Version)
			}
		}
	}
	if err != nil {
		h.askFail(c, "Skill version", id+"/"+version, err)
		return
	}
	writeJSON(c.w, struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}{ID: v.Epoch, Type: "skill_version_deleted"})
}

// moveDefault makes the newest version of the skill other than version its default.
func (h *Handler) moveDefault(ctx context.Context, identity, id, version string) error {
	all, err := h.skills.store.Versions(ctx, identity, id)
	if err != nil {
		return err
	}
	all = slices.DeleteFunc(all, func(v skills.Version) bool { return v.Version == version })
	if len(all) == 0 {
		return skills.ErrNotFound
	}
	newest := slices.MaxFunc(all, func(a, b skills.Version) int {
		ta, _ := versionKey(a)
		tb, _ := versionKey(b)
		return ta.Compare(tb)
	})
	_, err = h.skills.store.SetDefault(ctx, identity, id, newest.Version)
	return err
}
