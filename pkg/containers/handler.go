package containers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/memlimit"
	"github.com/codeinterp/codeinterp/pkg/netpolicy"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
	"github.com/codeinterp/codeinterp/pkg/skills"
)

// Config holds a Handler's settings. Identify is required; the zero value of every other field
// works.
type Config struct {
	// Identify returns the caller's identity ("" for a caller without a credential, who gets a
	// 401: anonymous callers have no lasting containers), or an error the client reads for a
	// request whose identity cannot be told (two credentials, a repeated identity header: a 400;
	// see package identity).
	Identify func(*http.Request) (string, error)
	// CredentialHeaders are headers a credential may come in beyond those files.CredentialsOf
	// keeps (e.g. x-litellm-api-key): the key check and the Files API get them too. Nil means
	// none.
	CredentialHeaders []string
	// Fetcher, if set, returns the upstream's Files API that the files of a call under prefix
	// ("" or one of PathPrefixes) are copied in from (file_ids, and container files created by
	// file_id); without one those are a 400.
	Fetcher func(prefix string) Fetcher
	// Verify, if set, checks a caller's credentials before any call of theirs is served: a
	// credential it refuses ([ErrUnauthorized]) is a 401, and a failure to check it a 502.
	// Without it every credential is taken (an authentication filter in front checks them).
	Verify func(ctx context.Context, identity string, credentials files.Credentials) error
	// PathPrefixes are served too, each before /v1/containers (e.g. "/analyst").
	PathPrefixes []string
	// MaxUploadBytes bounds one file; zero means 512 MiB.
	MaxUploadBytes int64
	// MaxExpiry bounds expires_after.minutes; zero means 20 minutes, as natively.
	MaxExpiry time.Duration
	// MaxUploadsPerIdentity bounds the file uploads (multipart or by file_id) one identity
	// has in progress at once; one more is a 429. An upload holds its container in use, so
	// without a bound a tenant trickling uploads could keep containers from expiring and
	// hold the server's capacity. Zero means 4.
	MaxUploadsPerIdentity int
	// MaxUploadingBytesPerIdentity bounds the bytes one identity's uploads in progress have
	// written together (each upload is also bounded by MaxUploadBytes); past it the upload is a
	// 413 and leaves nothing. Zero means MaxUploadBytes: at most one largest file's worth
	// arrives at once per identity.
	MaxUploadingBytesPerIdentity int64
	// UploadIdle ends a call whose body sent no byte for that long (an upload that stalls),
	// which then leaves nothing and frees its container: without it, an upload trickling one
	// byte now and then would hold the container in use indefinitely. Zero means 30 seconds.
	UploadIdle time.Duration
	// Uploads, if set, keeps the files clients upload through Anthropic's Files API (POST
	// /v1/files, ids "file_…"), which [AnthropicFiles] then serves beside the container files;
	// without it POST /v1/files is not served here (it belongs to the model's Files API).
	Uploads *Uploads
	// Skills, if set, keeps the skills of the Skills API (/v1/skills), which is served only
	// then; SkillLimits bound a bundle, MaxSkillUploads the skill uploads in progress in all
	// (zero means 4; each holds its bundle in memory until it is stored). See skills.go.
	Skills          skills.Store
	SkillLimits     skills.Limits
	MaxSkillUploads int
	// Log receives the handler's logs. If nil, nothing is logged.
	Log *zap.Logger
}

// maxJSONBody bounds a JSON request body of the API (a container create, a file by id).
const maxJSONBody = 1 << 20

// Handler serves the Containers API. It is safe for concurrent use.
type Handler struct {
	store Store
	files FileStore
	cfg   Config
	log   *zap.Logger
	mux   *http.ServeMux

	// uploadCount counts the uploads in progress per identity (files and skill bundles).
	uploadCount
	// mu guards uploading: the bytes the uploads in progress have written, per identity.
	mu        sync.Mutex
	uploading map[string]int64

	skills *skillAPI // nil without Config.Skills
}

var _ http.Handler = (*Handler)(nil)

// New returns a Handler over store and files.
func New(store Store, files FileStore, cfg Config) *Handler {
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = 512 << 20
	}
	if cfg.MaxExpiry <= 0 {
		cfg.MaxExpiry = 20 * time.Minute
	}
	if cfg.MaxUploadsPerIdentity <= 0 {
		cfg.MaxUploadsPerIdentity = 4
	}
	if cfg.MaxUploadingBytesPerIdentity <= 0 {
		cfg.MaxUploadingBytesPerIdentity = cfg.MaxUploadBytes
	}
	if cfg.UploadIdle <= 0 {
		cfg.UploadIdle = 30 * time.Second
	}
	h := &Handler{store: store, files: files, cfg: cfg, log: cfg.Log, mux: http.NewServeMux(),
		uploadCount: newUploadCount(cfg.MaxUploadsPerIdentity), uploading: map[string]int64{}, skills: newSkillAPI(cfg)}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	h.log = h.log.Named("containers")
	for _, prefix := range append([]string{""}, cfg.PathPrefixes...) {
		prefix = strings.TrimSuffix(prefix, "/")
		base := prefix + "/v1/containers"
		h.mux.HandleFunc("POST "+base, h.scoped(prefix, h.createContainer))
		h.mux.HandleFunc("GET "+base, h.scoped(prefix, h.listContainers))
		h.mux.HandleFunc("GET "+base+"/{id}", h.scoped(prefix, h.getContainer))
		h.mux.HandleFunc("DELETE "+base+"/{id}", h.scoped(prefix, h.deleteContainer))
		h.mux.HandleFunc("POST "+base+"/{id}/files", h.scoped(prefix, h.createFile))
		h.mux.HandleFunc("GET "+base+"/{id}/files", h.scoped(prefix, h.listFiles))
		h.mux.HandleFunc("GET "+base+"/{id}/files/{file}", h.scoped(prefix, h.getFile))
		h.mux.HandleFunc("DELETE "+base+"/{id}/files/{file}", h.scoped(prefix, h.deleteFile))
		h.mux.HandleFunc("GET "+base+"/{id}/files/{file}/content", h.scoped(prefix, h.fileContent))
		h.skillRoutes(prefix)
	}
	return h
}

// ServeHTTP serves one API call; a path the API does not have is a 404 in OpenAI's error shape.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w = guardAnswer(w, r)
	if _, pattern := h.mux.Handler(r); pattern == "" {
		writeError(w, &schema.RequestError{Status: http.StatusNotFound,
			Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path), Code: "unknown_url"})
		return
	}
	h.mux.ServeHTTP(w, r)
}

// call is one scoped API call.
type call struct {
	w        http.ResponseWriter
	r        *http.Request
	identity string
	// prefix is the path prefix the call came under ("" for /v1/containers).
	prefix string
}

func (h *Handler) scoped(prefix string, fn func(c call)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		identity, err := h.cfg.Identify(r)
		if err != nil {
			writeError(w, &schema.RequestError{Message: err.Error(), Code: "invalid_credentials"})
			return
		}
		if identity == "" {
			writeError(w, &schema.RequestError{Status: http.StatusUnauthorized, Code: "missing_api_key",
				Message: "You didn't provide an API key. Containers are kept per API key: send it in the Authorization header."})
			return
		}
		if h.cfg.Verify != nil {
			if err := h.cfg.Verify(r.Context(), identity, h.cfg.credentials(r)); err != nil {
				h.verifyFailed(w, r, err)
				return
			}
		}
		// Every body is read with the idle deadline: a JSON body that stalls holds the call too.
		r.Body = newIdleBody(w, r.Body, h.cfg.UploadIdle)
		fn(call{w: w, r: r, identity: identity, prefix: prefix})
	}
}

// credentials returns the credential headers of r that the key check and the Files API get.
func (cfg *Config) credentials(r *http.Request) files.Credentials {
	creds := files.CredentialsOf(r.Header)
	for _, k := range cfg.CredentialHeaders {
		if v := r.Header.Get(k); v != "" {
			creds[http.CanonicalHeaderKey(k)] = v
		}
	}
	return creds
}

// verifyFailed answers a credential Verify did not take: a 401 when the upstream refused it, a
// 502 when it could not be checked.
func (h *Handler) verifyFailed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrUnauthorized):
		writeError(w, &schema.RequestError{Status: http.StatusUnauthorized, Code: "invalid_api_key",
			Message: "Incorrect API key provided: the upstream refused it."})
	case r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
	default:
		h.log.Warn("verify an API key against the upstream", zap.Error(err))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write(errorBody(&schema.RequestError{Status: http.StatusBadGateway,
			Message: "The API key could not be checked: the upstream did not answer.", Code: "upstream_unavailable"}))
	}
}

// fail answers err, mapped to the API's status and error shape; errors that are not the
// client's go to the log, and the client reads a fixed text.
func (h *Handler) fail(c call, what string, err error) {
	var inv *InvalidError
	var re *schema.RequestError
	var mbe *http.MaxBytesError
	var se *SourceError
	switch {
	case errors.As(err, &re):
		writeError(c.w, re)
	case errors.As(err, &inv):
		writeError(c.w, &schema.RequestError{Message: inv.Message, Param: inv.Param, Code: "invalid_value"})
	case errors.Is(err, ErrNotFound):
		writeError(c.w, &schema.RequestError{Status: http.StatusNotFound, Message: what + " not found.", Code: "not_found"})
	case errors.Is(err, ErrExpired):
		writeError(c.w, &schema.RequestError{Message: "Container is expired.", Code: "container_expired"})
	case errors.Is(err, ErrTooLarge), errors.As(err, &mbe):
		// A body past its limit is the client's too, wherever in the body the limit was hit.
		writeError(c.w, &schema.RequestError{Status: http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("The file is too large: files are limited to %d bytes, and to the space left in the container.", h.cfg.MaxUploadBytes),
			Code:    "file_too_large"})
	case errors.Is(err, ErrFull):
		writeError(c.w, &schema.RequestError{Status: http.StatusTooManyRequests,
			Message: "No more containers can be created for this API key now: delete one, or wait for one to expire.", Code: "too_many_containers"})
	case errors.Is(err, ErrUnavailable):
		h.log.Warn("a container is unavailable", zap.String("method", c.r.Method), zap.Error(err))
		c.w.Header().Set("Content-Type", "application/json")
		c.w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = c.w.Write(errorBody(&schema.RequestError{Status: http.StatusServiceUnavailable, Message: "The container could not be started. Try again later.", Code: "server_error"}))
	case errors.Is(err, ErrUpstream), errors.Is(err, files.ErrUpstream):
		h.log.Warn("read a file of the Files API", zap.Error(err))
		c.w.Header().Set("Content-Type", "application/json")
		c.w.WriteHeader(http.StatusBadGateway)
		_, _ = c.w.Write(errorBody(&schema.RequestError{Status: http.StatusBadGateway, Message: "The file could not be read from the upstream's Files API.", Code: "files_api_failed"}))
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The body stalled past the idle deadline (which also ends the request's context).
		c.w.Header().Set("Connection", "close")
		writeError(c.w, &schema.RequestError{Status: http.StatusRequestTimeout,
			Message: fmt.Sprintf("The request body stalled: no byte arrived for %s.", h.cfg.UploadIdle), Code: "upload_timeout"})
	case c.r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
	case errors.As(err, &se) && se.Upstream:
		h.log.Warn("copy a file of the Files API", zap.Error(err))
		c.w.Header().Set("Content-Type", "application/json")
		c.w.WriteHeader(http.StatusBadGateway)
		_, _ = c.w.Write(errorBody(&schema.RequestError{Status: http.StatusBadGateway, Message: "The file could not be read from the upstream's Files API.", Code: "files_api_failed"}))
	case errors.As(err, &se):
		writeError(c.w, &schema.RequestError{Message: "The multipart body cannot be read: it is malformed or was cut short.", Code: "invalid_multipart"})
	default:
		h.log.Warn("containers API call failed", zap.String("method", c.r.Method), zap.String("what", what), zap.Error(err))
		c.w.Header().Set("Content-Type", "application/json")
		c.w.WriteHeader(http.StatusInternalServerError)
		_, _ = c.w.Write(errorBody(&schema.RequestError{Status: http.StatusInternalServerError, Message: "The container operation failed on the server.", Code: "server_error"}))
	}
}

func writeError(w http.ResponseWriter, e *schema.RequestError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.HTTPStatus())
	_, _ = w.Write(errorBody(e))
}

func writeJSON(w http.ResponseWriter, v any) {
	js, err := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		// Every value written here is made of strings, numbers and bools: this cannot happen.
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write(errorBody(&schema.RequestError{Status: http.StatusInternalServerError, Message: "The answer could not be encoded.", Code: "server_error"}))
		return
	}
	_, _ = w.Write(js)
}

// --- Containers ------------------------------------------------------------------------------

type containerJSON struct {
	ID           string          `json:"id"`
	Object       string          `json:"object"`
	Name         string          `json:"name"`
	CreatedAt    int64           `json:"created_at"`
	Status       string          `json:"status"`
	LastActiveAt int64           `json:"last_active_at"`
	ExpiresAfter expiryJSON      `json:"expires_after"`
	MemoryLimit  string          `json:"memory_limit,omitempty"`
	Network      netpolicy.Shown `json:"network_policy"`
}

type expiryJSON struct {
	Anchor  string `json:"anchor"`
	Minutes int64  `json:"minutes"`
}

func toJSON(c Container) containerJSON {
	status := "running"
	if c.Expired {
		status = "expired"
	}
	return containerJSON{
		ID: c.ID, Object: "container", Name: c.Name, CreatedAt: c.CreatedAt.Unix(), Status: status,
		LastActiveAt: c.LastActiveAt.Unix(),
		ExpiresAfter: expiryJSON{Anchor: "last_active_at", Minutes: int64((c.ExpiresAfter + time.Minute - 1) / time.Minute)},
		MemoryLimit:  c.MemoryLimit,
		Network:      netpolicy.Show(c.AllowedDomains),
	}
}

// createBody is POST /v1/containers.
type createBody struct {
	Name         *string `json:"name"`
	ExpiresAfter *struct {
		Anchor  string `json:"anchor"`
		Minutes *int64 `json:"minutes"`
	} `json:"expires_after"`
	FileIDs       []string          `json:"file_ids"`
	MemoryLimit   *string           `json:"memory_limit"`
	NetworkPolicy json.RawMessage   `json:"network_policy"`
	Skills        []json.RawMessage `json:"skills"`
}

func (h *Handler) createContainer(c call) {
	var body createBody
	if err := decodeJSON(c.r, &body); err != nil {
		h.fail(c, "", err)
		return
	}
	nc, err := h.newContainer(body)
	if err != nil {
		h.fail(c, "", err)
		return
	}
	store, lim := h.skillStore()
	var mounted []skills.Mounted
	if nc.Skills, mounted, err = ResolveSkills(c.r.Context(), store, lim, c.identity, body.Skills, "skills"); err != nil {
		h.fail(c, "", err)
		return
	}
	if len(body.FileIDs) > 0 {
		// The copies are an upload like any other: they hold the new container in use.
		if !h.beginUpload(c.identity) {
			h.tooManyUploads(c)
			return
		}
		defer h.endUpload(c.identity)
	}
	// Check what file_ids names before the container exists: a missing file then leaves
	// nothing. The files are then copied one at a time, each streamed from the Files API.
	for i, id := range body.FileIDs {
		if err := h.stat(c, id, fmt.Sprintf("file_ids[%d]", i)); err != nil {
			h.fail(c, "File", err)
			return
		}
	}
	ct, err := h.store.Create(c.r.Context(), c.identity, nc)
	if err != nil {
		h.fail(c, "Container", err)
		return
	}
	for i, id := range body.FileIDs {
		if _, err := h.putFetched(c, ct.ID, id, fmt.Sprintf("file_ids[%d]", i)); err != nil {
			// No half-made container: the files of the request come in whole, or not at all.
			if derr := h.store.Delete(context.WithoutCancel(c.r.Context()), c.identity, ct.ID); derr != nil {
				h.log.Warn("delete a container whose files failed", zap.Error(derr))
			}
			h.fail(c, "File", err)
			return
		}
	}
	h.attachSkills(c, ct.ID, mounted)
	writeJSON(c.w, toJSON(ct))
}

// newContainer checks a create body.
func (h *Handler) newContainer(b createBody) (NewContainer, error) {
	var nc NewContainer
	if b.Name == nil {
		return nc, &schema.RequestError{Message: "Missing required parameter: 'name'.", Param: "name", Code: "missing_required_parameter"}
	}
	nc.Name = *b.Name
	if len(nc.Name) > 256 || !utf8.ValidString(nc.Name) {
		return nc, &schema.RequestError{Message: "Invalid 'name': at most 256 characters of UTF-8.", Param: "name", Code: "invalid_value"}
	}
	if e := b.ExpiresAfter; e != nil {
		if e.Anchor != "last_active_at" {
			return nc, &schema.RequestError{Message: "Invalid 'expires_after.anchor': expected 'last_active_at'.", Param: "expires_after.anchor", Code: "invalid_value"}
		}
		if e.Minutes == nil {
			return nc, &schema.RequestError{Message: "Missing required parameter: 'expires_after.minutes'.", Param: "expires_after.minutes", Code: "missing_required_parameter"}
		}
		maxMinutes := int64(h.cfg.MaxExpiry / time.Minute)
		switch m := *e.Minutes; {
		case m < 1:
			return nc, &schema.RequestError{Message: "Invalid 'expires_after.minutes': expected a value at least 1.", Param: "expires_after.minutes", Code: "integer_below_min_value"}
		case m > maxMinutes:
			return nc, &schema.RequestError{Message: fmt.Sprintf("Invalid 'expires_after.minutes': expected a value at most %d.", maxMinutes), Param: "expires_after.minutes", Code: "integer_above_max_value"}
		default:
			nc.ExpiresAfter = time.Duration(m) * time.Minute
		}
	}
	if b.MemoryLimit != nil {
		if !memlimit.Valid(*b.MemoryLimit) {
			return nc, &schema.RequestError{Message: fmt.Sprintf("Invalid 'memory_limit': expected one of %s, got '%s'.", strings.Join(memlimit.Sizes(), ", "), *b.MemoryLimit),
				Param: "memory_limit", Code: "invalid_value"}
		}
		nc.MemoryLimit = *b.MemoryLimit
	}
	if b.NetworkPolicy != nil {
		policy, err := netpolicy.Parse(b.NetworkPolicy, "network_policy")
		if err != nil {
			return nc, err
		}
		nc.NetworkPolicy = policy
	}
	if len(b.FileIDs) > 50 {
		return nc, &schema.RequestError{Message: "Invalid 'file_ids': at most 50 files.", Param: "file_ids", Code: "array_above_max_length"}
	}
	return nc, nil
}

func (h *Handler) listContainers(c call) {
	p, err := readPage(c.r)
	if err != nil {
		h.fail(c, "", err)
		return
	}
	all, err := h.store.List(c.r.Context(), c.identity)
	if err != nil {
		h.fail(c, "Container", err)
		return
	}
	if name := c.r.URL.Query().Get("name"); name != "" {
		all = slices.DeleteFunc(all, func(ct Container) bool { return ct.Name != name })
	}
	items, hasMore, err := page(p, all, func(ct Container) (time.Time, string) { return ct.CreatedAt, ct.ID })
	if err != nil {
		h.fail(c, "", err)
		return
	}
	data := make([]containerJSON, len(items))
	for i, ct := range items {
		data[i] = toJSON(ct)
	}
	writeJSON(c.w, listJSON(data, hasMore, func(v containerJSON) string { return v.ID }))
}

func (h *Handler) getContainer(c call) {
	ct, err := h.store.Get(c.r.Context(), c.identity, c.r.PathValue("id"))
	if err != nil {
		h.fail(c, "Container", err)
		return
	}
	writeJSON(c.w, toJSON(ct))
}

func (h *Handler) deleteContainer(c call) {
	id := c.r.PathValue("id")
	if err := h.store.Delete(c.r.Context(), c.identity, id); err != nil {
		h.fail(c, "Container", err)
		return
	}
	writeJSON(c.w, deletedJSON{ID: id, Object: "container.deleted", Deleted: true})
}

type deletedJSON struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// --- Files -----------------------------------------------------------------------------------

// decodeJSON reads a JSON body of at most maxJSONBody bytes into v, refusing unknown fields as
// the native API does.
func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxJSONBody+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return &schema.RequestError{Message: "Unknown parameter: '" + strings.Trim(f, `"`) + "'.", Param: strings.Trim(f, `"`), Code: "unknown_parameter"}
		}
		return &schema.RequestError{Message: "The body is not valid JSON for this call.", Code: "invalid_json"}
	}
	if dec.More() {
		return &schema.RequestError{Message: "The body is not valid JSON for this call.", Code: "invalid_json"}
	}
	return nil
}

// pageRequest is a list call's limit, order and cursor.
type pageRequest struct {
	limit int
	desc  bool
	after string
}

func readPage(r *http.Request) (pageRequest, error) {
	q := r.URL.Query()
	p := pageRequest{limit: 20, desc: true, after: q.Get("after")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return p, &schema.RequestError{Message: "Invalid 'limit': expected an integer from 1 to 100.", Param: "limit", Code: "invalid_value"}
		}
		p.limit = n
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		p.desc = false
	default:
		return p, &schema.RequestError{Message: "Invalid 'order': expected 'asc' or 'desc'.", Param: "order", Code: "invalid_value"}
	}
	return p, nil
}

// page sorts items by creation (then id) in the asked order and returns the page after the
// cursor, and whether more follow. An unknown cursor is a 400.
func page[T any](p pageRequest, items []T, key func(T) (time.Time, string)) ([]T, bool, error) {
	slices.SortFunc(items, func(a, b T) int {
		ta, ia := key(a)
		tb, ib := key(b)
		c := cmp.Or(ta.Compare(tb), strings.Compare(ia, ib))
		if p.desc {
			return -c
		}
		return c
	})
	if p.after != "" {
		i := slices.IndexFunc(items, func(t T) bool { _, id := key(t); return id == p.after })
		if i < 0 {
			return nil, false, &schema.RequestError{Message: fmt.Sprintf("Invalid 'after': no object '%s' in this list.", p.after), Param: "after", Code: "invalid_value"}
		}
		items = items[i+1:]
	}
	if len(items) > p.limit {
		return items[:p.limit], true, nil
	}
	return items, false, nil
}

type listBody[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

func listJSON[T any](data []T, hasMore bool, id func(T) string) listBody[T] {
	out := listBody[T]{Object: "list", Data: data, HasMore: hasMore}
	if len(data) > 0 {
		first, last := id(data[0]), id(data[len(data)-1])
		out.FirstID, out.LastID = &first, &last
	}
	return out
}

// errorBody is an error answer in OpenAI's error shape, which the Containers API shares with
// the Responses API it belongs to.
func errorBody(e *schema.RequestError) []byte { return responses.Surface{}.ErrorBody(e) }

// idleBody is a request body read with an idle deadline: each Read must bring a byte within
// idle of the last one. It sets the connection's read deadline through the ResponseController
// (a stalled read then fails, the upload leaves nothing, and the call ends); where the
// connection cannot take deadlines it reads without one. The deadline is cleared once the body
// has been read whole, so that a call that works on after its body (a copy from the Files API)
// is not cut; it stays after a failed read, so that the server's own read of what is left of a
// stalled body fails at once instead of waiting for it.
type idleBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	idle time.Duration
	// off reports that deadlines cannot be set on the connection, or no longer need to be.
	off bool
}

func newIdleBody(w http.ResponseWriter, body io.ReadCloser, idle time.Duration) io.ReadCloser {
	if body == nil || body == http.NoBody {
		return body
	}
	return &idleBody{ReadCloser: body, rc: http.NewResponseController(w), idle: idle}
}

func (b *idleBody) Read(p []byte) (int, error) {
	if !b.off {
		if err := b.rc.SetReadDeadline(time.Now().Add(b.idle)); err != nil {
			b.off = true
		}
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF && !b.off:
		b.off = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.off = true
		err = fmt.Errorf("no byte of the body for %s: %w", b.idle, err)
	}
	return n, err
}
