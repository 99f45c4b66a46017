// Package files reads the files of an OpenAI-compatible Files API — GET /v1/files/{id} for a
// file's name and size, GET /v1/files/{id}/content for its bytes — with the caller's own
// credentials, so that a file the caller uploaded to its model API can be copied into one of
// its containers (the Containers API's file_ids, and the code_interpreter tool's file_ids).
package files

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"
)

// Credentials are the caller's headers forwarded to the Files API (Authorization, Api-Key,
// X-Api-Key, OpenAI-Organization, OpenAI-Project), keyed by their canonical names.
type Credentials map[string]string

// credentialHeaders are the headers [CredentialsOf] keeps, in canonical form.
var credentialHeaders = []string{"Authorization", "Api-Key", "X-Api-Key", "Openai-Organization", "Openai-Project"}

// CredentialsOf returns the credential headers of h; the others are not forwarded.
func CredentialsOf(h http.Header) Credentials {
	out := Credentials{}
	for _, k := range credentialHeaders {
		if v := h.Get(k); v != "" {
			out[k] = v
		}
	}
	return out
}

// The errors of [API]'s methods.
var (
	// ErrNotFound is a file the Files API does not have, or will not show the caller (a 401 or
	// 403: to the caller it does not exist).
	ErrNotFound = errors.New("file not found")
	// ErrUpstream is any other failure; its message names the step and the status, never the
	// body the upstream sent.
	ErrUpstream = errors.New("files api failed")
)

// maxMetadata bounds the JSON of a file's metadata.
const maxMetadata = 1 << 20

// maxName bounds a file name, in bytes (the limit of a Linux file name).
const maxName = 255

// Doer sends one HTTP request. *http.Client implements it.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// API is a Files API at Base. Its zero value (with a Base) works; it is safe for concurrent use
// if its Client is.
type API struct {
	// Base is the upstream's base URL, e.g. "http://127.0.0.1:10000": a file is at
	// {Base}/v1/files/{id}.
	Base string
	// Client sends the calls. If nil, a client that follows no redirect: net/http would carry
	// Api-Key and X-Api-Key to another host.
	Client Doer
}

// Stat returns the name of the file fileID (a base name, safe as the name of a file) and its
// size in bytes.
func (a *API) Stat(ctx context.Context, cred Credentials, fileID string) (name string, bytes int64, err error) {
	resp, err := a.get(ctx, cred, fileID, "", "application/json")
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var meta struct {
		Filename *string `json:"filename"`
		Bytes    int64   `json:"bytes"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxMetadata)).Decode(&meta); err != nil {
		return "", 0, fmt.Errorf("%w: retrieve file %s: decode the answer: %v", ErrUpstream, fileID, err)
	}
	if meta.Filename == nil {
		return "", 0, fmt.Errorf("%w: retrieve file %s: the answer has no filename", ErrUpstream, fileID)
	}
	if meta.Bytes < 0 {
		return "", 0, fmt.Errorf("%w: retrieve file %s: negative size", ErrUpstream, fileID)
	}
	name, ok := baseName(*meta.Filename)
	if !ok {
		return "", 0, fmt.Errorf("%w: retrieve file %s: its filename cannot name a file", ErrUpstream, fileID)
	}
	return name, meta.Bytes, nil
}

// Fetch returns the name of the file fileID, as [API.Stat] does, and its content, which the
// caller reads as it arrives and closes.
func (a *API) Fetch(ctx context.Context, cred Credentials, fileID string) (name string, content io.ReadCloser, err error) {
	name, _, err = a.Stat(ctx, cred, fileID)
	if err != nil {
		return "", nil, err
	}
	resp, err := a.get(ctx, cred, fileID, "/content", "application/octet-stream")
	if err != nil {
		return "", nil, err
	}
	return name, resp.Body, nil
}

// get sends GET {Base}/v1/files/{fileID}{suffix} and returns its 200 answer.
func (a *API) get(ctx context.Context, cred Credentials, fileID, suffix, accept string) (*http.Response, error) {
	step := "retrieve file " + fileID
	if suffix != "" {
		step = "download file " + fileID
	}
	if fileID == "" || strings.ContainsAny(fileID, "/?#%\\") || fileID == "." || fileID == ".." {
		// Such an id would name another path of the upstream.
		return nil, ErrNotFound
	}
	u := strings.TrimSuffix(a.Base, "/") + "/v1/files/" + url.PathEscape(fileID) + suffix
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUpstream, step, err)
	}
	for k, v := range cred {
		req.Header.Set(k, v)
	}
	req.Header.Set("Accept", accept)
	resp, err := a.client().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The error of a Doer names the URL (the upstream's address), never a header.
		return nil, fmt.Errorf("%w: %s: %v", ErrUpstream, step, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	// Drain a little so the connection can be reused; the body is never shown.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxMetadata))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusUnauthorized, http.StatusForbidden:
		return nil, ErrNotFound
	default:
		return nil, fmt.Errorf("%w: %s: status %d", ErrUpstream, step, resp.StatusCode)
	}
}

func (a *API) client() Doer {
	if a.Client != nil {
		return a.Client
	}
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// baseName returns the last element of name (a client may have uploaded it with a path, with
// either slash), and whether it can name a file: not empty, not "." or "..", no NUL, valid
// UTF-8, at most 255 bytes.
func baseName(name string) (string, bool) {
	name = strings.ReplaceAll(name, `\`, "/")
	if strings.HasSuffix(name, "/") {
		return "", false
	}
	name = path.Base(name)
	if name == "" || name == "." || name == ".." || name == "/" || len(name) > maxName ||
		strings.ContainsRune(name, 0) || !utf8.ValidString(name) {
		return "", false
	}
	return name, true
}
