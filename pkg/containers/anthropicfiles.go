package containers

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/schema/messages"
)

// This file is Anthropic's Files API over the container files: the ids a Messages answer names
// in its *_output blocks ("cfile_…") are fetched the way the Anthropic SDKs fetch the files the
// native code execution tool writes (client.beta.files.download / retrieve_metadata).

// AnthropicFiles serves Anthropic's Files API — GET /v1/files (list), GET /v1/files/{id}
// (metadata), GET /v1/files/{id}/content (the bytes) and DELETE /v1/files/{id} — over the
// container files of the caller's containers, in Anthropic's shapes and errors; with
// Config.Uploads also POST /v1/files and the uploads' "file_…" ids (see anthropicupload.go).
// Otherwise only container file ids ("cfile_…") are known here: the files of the model's own
// Files API stay with the upstream, which the shipped Envoy config routes every other id to.
//
// A container file id does not name its container: a call looks for it in the caller's own
// containers (most recently active first), so an id of another identity's file is unknown, a
// 404, whatever the caller sends. Looking at a container refreshes its last activity, as every
// call of the Containers API does. It is safe for concurrent use.
type AnthropicFiles struct {
	store Store
	files FileStore
	cfg   Config
	log   *zap.Logger
	mux   *http.ServeMux
	// bases are the paths served, "/v1/files" under each prefix.
	bases []string

	// uploadCount counts the uploads in progress per identity.
	uploadCount
}

var _ http.Handler = (*AnthropicFiles)(nil)

// NewAnthropicFiles returns the Files API over store and files. Of cfg it uses Identify,
// Verify, CredentialHeaders, PathPrefixes and Log.
func NewAnthropicFiles(store Store, files FileStore, cfg Config) *AnthropicFiles {
	if cfg.MaxUploadsPerIdentity <= 0 {
		cfg.MaxUploadsPerIdentity = 4
	}
	if cfg.UploadIdle <= 0 {
		cfg.UploadIdle = 30 * time.Second
	}
	a := &AnthropicFiles{store: store, files: files, cfg: cfg, log: cfg.Log, mux: http.NewServeMux(), uploadCount: newUploadCount(cfg.MaxUploadsPerIdentity)}
	if a.log == nil {
		a.log = zap.NewNop()
	}
	a.log = a.log.Named("anthropic_files")
	for _, prefix := range append([]string{""}, cfg.PathPrefixes...) {
		base := strings.TrimSuffix(prefix, "/") + "/v1/files"
		a.bases = append(a.bases, base)
		a.mux.HandleFunc("GET "+base, a.scoped(a.list))
		a.mux.HandleFunc("GET "+base+"/{file}", a.scoped(a.metadata))
		a.mux.HandleFunc("GET "+base+"/{file}/content", a.scoped(a.content))
		a.mux.HandleFunc("DELETE "+base+"/{file}", a.scoped(a.delete))
		if cfg.Uploads != nil {
			a.mux.HandleFunc("POST "+base, a.scoped(a.upload))
		}
	}
	return a
}

// Serves reports whether r's path is one of the Files API's (under any prefix), whatever its
// method: the server in front sends those here, the rest to the Containers API.
func (a *AnthropicFiles) Serves(r *http.Request) bool {
	for _, base := range a.bases {
		if r.URL.Path == base || strings.HasPrefix(r.URL.Path, base+"/") {
			return true
		}
	}
	return false
}

// ServeHTTP serves one call; a path or method the API does not have is a 404 in Anthropic's
// error shape.
func (a *AnthropicFiles) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w = guardAnswer(w, r)
	if _, pattern := a.mux.Handler(r); pattern == "" {
		writeAnthropicError(w, http.StatusNotFound, fmt.Sprintf("Not found: %s %s", r.Method, r.URL.Path))
		return
	}
	a.mux.ServeHTTP(w, r)
}

// fileCall is one scoped call of the Files API.
type fileCall struct {
	w        http.ResponseWriter
	r        *http.Request
	identity string
}

// anthropicCaller returns the identity of r's caller, its credential checked as cfg says; when
// there is none, or it is refused or cannot be checked, it answers r in Anthropic's error shape
// and ok is false.
func anthropicCaller(cfg *Config, log *zap.Logger, w http.ResponseWriter, r *http.Request) (identity string, ok bool) {
	identity, err := cfg.Identify(r)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return "", false
	}
	if identity == "" {
		writeAnthropicError(w, http.StatusUnauthorized, "x-api-key header is required")
		return "", false
	}
	if cfg.Verify != nil {
		if err := cfg.Verify(r.Context(), identity, cfg.credentials(r)); err != nil {
			switch {
			case errors.Is(err, ErrUnauthorized):
				writeAnthropicError(w, http.StatusUnauthorized, "invalid x-api-key")
			case r.Context().Err() != nil:
				// The client went away; nobody reads an answer.
			default:
				log.Warn("verify an API key against the upstream", zap.Error(err))
				writeAnthropicError(w, http.StatusBadGateway, "The API key could not be checked: the upstream did not answer.")
			}
			return "", false
		}
	}
	return identity, true
}

func (a *AnthropicFiles) scoped(fn func(c fileCall)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		identity, ok := anthropicCaller(&a.cfg, a.log, w, r)
		if !ok {
			return
		}
		fn(fileCall{w: w, r: r, identity: identity})
	}
}

// fileMetadataJSON is Anthropic's FileMetadata.
type fileMetadataJSON struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Filename     string  `json:"filename"`
	MimeType     string  `json:"mime_type"`
	SizeBytes    int64   `json:"size_bytes"`
	CreatedAt    string  `json:"created_at"`
	Downloadable bool    `json:"downloadable"`
	ExpiresAt    *string `json:"expires_at"`
}

// metadataOf is f's metadata; a file lives as long as its container, so it expires when the
// container would if it stayed idle from now on.
func metadataOf(f File, ct Container) fileMetadataJSON {
	m := fileMetadataJSON{ID: f.ID, Type: "file", Filename: path.Base(f.Path), MimeType: mimeType(f.Path),
		SizeBytes: f.Bytes, CreatedAt: f.CreatedAt.UTC().Format(time.RFC3339), Downloadable: true}
	if ct.ExpiresAfter > 0 && !ct.LastActiveAt.IsZero() {
		at := ct.LastActiveAt.Add(ct.ExpiresAfter).UTC().Format(time.RFC3339)
		m.ExpiresAt = &at
	}
	return m
}

// mimeTypes are the types of the files code usually writes, so that they do not depend on the
// host's mime tables; other extensions go to mime.TypeByExtension.
var mimeTypes = map[string]string{
	".txt": "text/plain", ".csv": "text/csv", ".md": "text/markdown", ".py": "text/x-python",
	".json": "application/json", ".html": "text/html", ".xml": "application/xml", ".pdf": "application/pdf",
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
	".svg": "image/svg+xml", ".webp": "image/webp", ".zip": "application/zip",
	".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
	".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
	".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
}

// mimeType is the media type of a file by its name's extension, without parameters.
func mimeType(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := mimeTypes[ext]; ok {
		return t
	}
	if t, _, err := mime.ParseMediaType(mime.TypeByExtension(ext)); err == nil && t != "" {
		return t
	}
	return "application/octet-stream"
}

// isContainerFileID reports whether id can be a container file's id.
func isContainerFileID(id string) bool {
	return strings.HasPrefix(id, "cfile_") && len(id) <= 64
}

// find returns file fileID of the caller's containers and the container holding it. A file of
// no container of theirs, or of an expired one, is ErrNotFound.
func (a *AnthropicFiles) find(c fileCall, fileID string) (File, Container, error) {
	if !isContainerFileID(fileID) {
		return File{}, Container{}, ErrNotFound
	}
	cts, err := a.live(c)
	if err != nil {
		return File{}, Container{}, err
	}
	for _, ct := range cts {
		f, err := a.files.File(c.r.Context(), c.identity, ct.ID, fileID)
		switch {
		case err == nil:
			return f, ct, nil
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrExpired):
			// Not this one (or it expired since it was listed).
		default:
			return File{}, Container{}, err
		}
	}
	return File{}, Container{}, ErrNotFound
}

// live returns the caller's containers that have not expired, the most recently active first.
func (a *AnthropicFiles) live(c fileCall) ([]Container, error) {
	cts, err := a.store.List(c.r.Context(), c.identity)
	if err != nil {
		return nil, err
	}
	cts = slices.DeleteFunc(cts, func(ct Container) bool { return ct.Expired })
	slices.SortFunc(cts, func(x, y Container) int {
		return cmp.Or(y.LastActiveAt.Compare(x.LastActiveAt), strings.Compare(x.ID, y.ID))
	})
	return cts, nil
}

func (a *AnthropicFiles) metadata(c fileCall) {
	id := c.r.PathValue("file")
	if a.isUpload(id) {
		u, err := a.cfg.Uploads.File(c.identity, id)
		if err != nil {
			a.fail(c, id, err)
			return
		}
		writeJSON(c.w, uploadMetadata(u))
		return
	}
	f, ct, err := a.find(c, id)
	if err != nil {
		a.fail(c, id, err)
		return
	}
	writeJSON(c.w, metadataOf(f, ct))
}

// content streams a file's bytes, typed by its name, as an attachment named as the file.
func (a *AnthropicFiles) content(c fileCall) {
	id := c.r.PathValue("file")
	if a.isUpload(id) {
		// As natively, a file the client uploaded is not downloadable: only those code wrote are.
		if _, err := a.cfg.Uploads.File(c.identity, id); err != nil {
			a.fail(c, id, err)
			return
		}
		writeAnthropicErrorCode(c.w, http.StatusBadRequest, "file_not_downloadable",
			fmt.Sprintf("File %s is not downloadable: only files created by code execution can be downloaded.", id))
		return
	}
	_, ct, err := a.find(c, id)
	if err != nil {
		a.fail(c, id, err)
		return
	}
	rc, f, err := a.files.Open(c.r.Context(), c.identity, ct.ID, id)
	if err != nil {
		a.fail(c, id, err)
		return
	}
	defer rc.Close()
	name := path.Base(f.Path)
	c.w.Header().Set("Content-Type", mimeType(name))
	c.w.Header().Set("Content-Length", strconv.FormatInt(f.Bytes, 10))
	c.w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	if _, err := io.Copy(c.w, rc); err != nil && c.r.Context().Err() == nil {
		// The status is out: all that is left is to cut the body short, which the length shows.
		a.log.Warn("stream a container file", zap.Error(err))
	}
}

func (a *AnthropicFiles) delete(c fileCall) {
	id := c.r.PathValue("file")
	var err error
	if a.isUpload(id) {
		err = a.cfg.Uploads.Remove(c.identity, id)
	} else {
		var ct Container
		if _, ct, err = a.find(c, id); err == nil {
			err = a.files.Remove(c.r.Context(), c.identity, ct.ID, id)
		}
	}
	if err != nil {
		a.fail(c, id, err)
		return
	}
	writeJSON(c.w, struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}{ID: id, Type: "file_deleted"})
}

// listQuery is a list call's parameters: the GA ones (limit, page, ids[]), the beta ones
// (limit, before_id, after_id) and scope_id, which here names a container.
type listQuery struct {
	limit             int
	page              string
	ids               []string
	beforeID, afterID string
	scope             string
	// beta reports whether the call asked for the beta shapes (anthropic-beta:
	// files-api-2025-04-14), which page by before_id/after_id and answer has_more.
	beta bool
}

// maxListIDs bounds ids[] as natively.
const maxListIDs = 100

func readListQuery(r *http.Request) (listQuery, error) {
	q := r.URL.Query()
	lq := listQuery{limit: 20, page: q.Get("page"), beforeID: q.Get("before_id"), afterID: q.Get("after_id"),
		scope: q.Get("scope_id"), ids: append(q["ids[]"], q["ids"]...)}
	for _, v := range r.Header.Values("anthropic-beta") {
		for b := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(b) == "files-api-2025-04-14" {
				lq.beta = true
			}
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return lq, errors.New("limit: Input should be an integer from 1 to 1000")
		}
		lq.limit = n
	}
	switch {
	case len(lq.ids) > maxListIDs:
		return lq, fmt.Errorf("ids: at most %d ids", maxListIDs)
	case len(lq.ids) > 0 && (lq.page != "" || q.Has("limit")):
		return lq, errors.New("ids cannot be combined with page or limit")
	case lq.beforeID != "" && lq.afterID != "":
		return lq, errors.New("before_id and after_id cannot be combined")
	case lq.page != "" && !strings.HasPrefix(lq.page, "page_"):
		return lq, errors.New("page: invalid page cursor")
	}
	return lq, nil
}

// listPage is GA's list answer; betaListPage the beta one's.
type listPage struct {
	Data     []fileMetadataJSON `json:"data"`
	NextPage *string            `json:"next_page"`
}

type betaListPage struct {
	Data    []fileMetadataJSON `json:"data"`
	FirstID *string            `json:"first_id"`
	LastID  *string            `json:"last_id"`
	HasMore bool               `json:"has_more"`
}

// list is GET /v1/files: the caller's uploads (when this server keeps them, and no scope_id is
// given) and the files of their live containers (of the one scope_id names, if given), the newest
// first. Natively the list is every file of the workspace, uploads included; the shipped Envoy
// config routes GET /v1/files here only with the uploads (envoy.RouteAnthropicUploads), else it
// goes to the model's own Files API and a client reaches this list on the API listener.
func (a *AnthropicFiles) list(c fileCall) {
	lq, err := readListQuery(c.r)
	if err != nil {
		writeAnthropicError(c.w, http.StatusBadRequest, err.Error())
		return
	}
	cts, err := a.live(c)
	if err != nil {
		a.fail(c, "", err)
		return
	}
	type entry struct {
		id string
		at time.Time
		m  fileMetadataJSON
	}
	var all []entry
	if a.cfg.Uploads != nil && lq.scope == "" {
		for _, u := range a.cfg.Uploads.List(c.identity) {
			all = append(all, entry{u.ID, u.CreatedAt, uploadMetadata(u)})
		}
	}
	for _, ct := range cts {
		if lq.scope != "" && ct.ID != lq.scope {
			continue
		}
		fs, err := a.files.Files(c.r.Context(), c.identity, ct.ID)
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrExpired) {
			continue // gone since it was listed
		}
		if err != nil {
			a.fail(c, "", err)
			return
		}
		for _, f := range fs {
			all = append(all, entry{f.ID, f.CreatedAt, metadataOf(f, ct)})
		}
	}
	// The newest first, as natively; the id breaks ties so that a cursor has one place.
	slices.SortFunc(all, func(x, y entry) int {
		return cmp.Or(y.at.Compare(x.at), strings.Compare(y.id, x.id))
	})
	if len(lq.ids) > 0 {
		// One page of the files asked for; unknown ids are left out, as natively.
		all = slices.DeleteFunc(all, func(e entry) bool { return !slices.Contains(lq.ids, e.id) })
		lq.limit = len(all)
	}
	index := func(id string) int { return slices.IndexFunc(all, func(e entry) bool { return e.id == id }) }
	start, end := 0, len(all)
	switch {
	case lq.page != "":
		at, id, ok := parseCursor(lq.page)
		start = len(all)
		if ok {
			// The first file after the cursor's place: the cursor's own file may be gone.
			start = slices.IndexFunc(all, func(e entry) bool {
				return cmp.Or(at.Compare(e.at), strings.Compare(id, e.id)) > 0
			})
			if start < 0 {
				start = len(all)
			}
		}
	case lq.afterID != "":
		start = len(all)
		if i := index(lq.afterID); i >= 0 {
			start = i + 1
		}
	case lq.beforeID != "":
		end = max(index(lq.beforeID), 0)
		start = max(end-lq.limit, 0)
	}
	items := all[start:end]
	more := len(items) > lq.limit
	if more {
		items = items[:lq.limit]
	}
	data := make([]fileMetadataJSON, len(items))
	for i, e := range items {
		data[i] = e.m
	}
	if lq.beta {
		p := betaListPage{Data: data, HasMore: more || (lq.beforeID != "" && start > 0)}
		if len(data) > 0 {
			first, last := data[0].ID, data[len(data)-1].ID
			p.FirstID, p.LastID = &first, &last
		}
		writeJSON(c.w, p)
		return
	}
	p := listPage{Data: data}
	if more {
		last := items[len(items)-1]
		next := cursor(last.at, last.id)
		p.NextPage = &next
	}
	writeJSON(c.w, p)
}

// cursor is the page cursor of the files after (createdAt, id) in the list's order.
func cursor(createdAt time.Time, id string) string {
	return "page_" + strconv.FormatInt(createdAt.UnixNano(), 36) + "_" + url.PathEscape(id)
}

func parseCursor(s string) (time.Time, string, bool) {
	at, id, ok := strings.Cut(strings.TrimPrefix(s, "page_"), "_")
	if !ok {
		return time.Time{}, "", false
	}
	n, err := strconv.ParseInt(at, 36, 64)
	if err != nil {
		return time.Time{}, "", false
	}
	if id, err = url.PathUnescape(id); err != nil {
		return time.Time{}, "", false
	}
	return time.Unix(0, n), id, true
}

// fail answers err in Anthropic's error shape; errors that are not the client's go to the log,
// and the client reads a fixed text.
func (a *AnthropicFiles) fail(c fileCall, fileID string, err error) {
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrExpired):
		writeAnthropicError(c.w, http.StatusNotFound, fmt.Sprintf("File not found: %s", fileID))
	case c.r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
	case errors.Is(err, ErrUnavailable):
		a.log.Warn("a container is unavailable", zap.String("method", c.r.Method), zap.Error(err))
		writeAnthropicError(c.w, http.StatusServiceUnavailable, "The container holding the file could not be reached. Try again later.")
	default:
		a.log.Warn("files API call failed", zap.String("method", c.r.Method), zap.Error(err))
		writeAnthropicError(c.w, http.StatusInternalServerError, "The file operation failed on the server.")
	}
}

// writeAnthropicError writes an error in Anthropic's shape, its type by status.
func writeAnthropicError(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(messages.ErrorBody(status, message))
}
