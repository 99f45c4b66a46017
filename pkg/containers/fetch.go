package containers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Doer sends one HTTP request. *http.Client implements it.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// FilesAPI is a [Fetcher] over an OpenAI-compatible Files API: GET {Base}/v1/files/{id} for the
// file's name, then GET {Base}/v1/files/{id}/content for its bytes, both with the caller's
// credentials.
type FilesAPI struct {
	// Base is the upstream's base URL, e.g. "http://127.0.0.1:10000" (through Envoy, so the
	// calls are routed and logged like every other model API call).
	Base string
	// Client sends the calls; if nil, a client that follows no redirect (the caller's
	// credentials must not reach another host).
	Client Doer
}

var _ Fetcher = (*FilesAPI)(nil)

// Fetch returns the file's name and content; the caller closes the content.
func (f *FilesAPI) Fetch(ctx context.Context, cred Credentials, fileID string) (string, io.ReadCloser, error) {
	base := strings.TrimSuffix(f.Base, "/") + "/v1/files/" + url.PathEscape(fileID)
	resp, err := f.get(ctx, cred, base, "application/json")
	if err != nil {
		return "", nil, err
	}
	var meta struct {
		Filename string `json:"filename"`
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(&meta)
	resp.Body.Close()
	if err != nil {
		return "", nil, fmt.Errorf("%w: read file %s: %v", ErrUpstream, fileID, err)
	}
	resp, err = f.get(ctx, cred, base+"/content", "application/binary")
	if err != nil {
		return "", nil, err
	}
	return meta.Filename, resp.Body, nil
}

// get sends one GET and returns its 200 answer; a 404 is ErrNotFound.
func (f *FilesAPI) get(ctx context.Context, cred Credentials, u, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUpstream, err)
	}
	for k, v := range cred {
		req.Header.Set(k, v)
	}
	req.Header.Set("Accept", accept)
	client := f.Client
	if client == nil {
		// No redirects: net/http would carry Api-Key and X-Api-Key to another host.
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUpstream, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxJSONBody))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound:
		return nil, ErrNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		return nil, ErrNotFound // the caller may not read it: to them it does not exist
	default:
		return nil, fmt.Errorf("%w: status %d", ErrUpstream, resp.StatusCode)
	}
}
