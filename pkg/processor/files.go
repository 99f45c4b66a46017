package processor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// Files reads the caller's files of an upstream's Files API. *files.API implements it.
type Files interface {
	// Stat returns the file's name and size; files.ErrNotFound when the caller has no such
	// file, files.ErrUpstream when the Files API failed.
	Stat(ctx context.Context, cred files.Credentials, fileID string) (name string, bytes int64, err error)
	// Fetch returns the file's name and its content, which the caller closes.
	Fetch(ctx context.Context, cred files.Credentials, fileID string) (name string, content io.ReadCloser, err error)
}

// Bounds of the look-up of a request's file_ids, done before anything goes upstream: it holds
// the request body's answer to Envoy, whose message_timeout (30s in envoy/envoy.yaml) must not
// pass meanwhile.
const (
	filesStatTimeout     = 10 * time.Second
	filesStatConcurrency = 8
)

// filesFor returns the Files API of the route: the profile's upstream, under the request
// path's prefix before "/v1/" (the prefix the route serves the API under, as the follow-ups
// keep it): a request to {upstream}/openai/v1/responses reads {upstream}/openai/v1/files/{id}.
func (st *streamState) filesFor() Files {
	base := strings.TrimSuffix(st.profile.Upstream, "/")
	if p := pathOnly(st.path); strings.Contains(p, "/v1/") {
		base += p[:strings.Index(p, "/v1/")]
	}
	return st.srv.files(base)
}

// credentials are the caller's headers the Files API is called with.
func (st *streamState) credentials() files.Credentials {
	return files.CredentialsOf(st.headers.forward(nil))
}

// statFiles checks, before the request goes upstream, that every file of the tool's file_ids
// is one the caller may read, and keeps their names for the loop, which copies them into the
// container on its first run. It returns the answer to send instead when one is not: a 400
// naming the first missing file or the first larger than max_upload_bytes, or a 502 when the
// Files API failed.
func (st *streamState) statFiles(ids []string) *extprocv3.ProcessingResponse {
	ctx, cancel := context.WithTimeout(st.ctx, filesStatTimeout)
	defer cancel()
	api, cred := st.filesFor(), st.credentials()
	errs := make([]error, len(ids))
	out := make([]loop.InputFile, len(ids))
	sem := make(chan struct{}, filesStatConcurrency) // bounds the concurrent look-ups
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			name, size, err := api.Stat(ctx, cred, id)
			errs[i] = err
			out[i] = loop.InputFile{ID: id, Name: name, Bytes: size}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if errors.Is(err, files.ErrNotFound) {
			return st.clientError(&schema.RequestError{
				Message: fmt.Sprintf("File '%s' not found: container.file_ids names a file the Files API does not have.", ids[i]),
				Param:   "tools",
				Code:    "file_not_found",
			}, "codeinterp_file_not_found", err)
		}
	}
	if limit := st.srv.maxInputFile; limit > 0 {
		for i, f := range out {
			if errs[i] == nil && f.Bytes > limit {
				return st.clientError(&schema.RequestError{
					Message: fmt.Sprintf("File '%s' is too large: container.file_ids names a file of %d bytes, and a container file may have at most %d bytes.", ids[i], f.Bytes, limit),
					Param:   "tools",
					Code:    "file_too_large",
				}, "codeinterp_file_too_large", nil)
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			st.logger().Warn("look up container.file_ids", zap.Error(err))
			st.outcome = "files_api_failed"
			return st.gatewayError("files_api_failed", "codeinterp could not read the files of container.file_ids from the Files API.", "codeinterp_files_api_failed")
		}
	}
	st.inputFiles = out
	return nil
}

// boundFiles is a Files API with the caller's credentials, as the loop fetches files.
type boundFiles struct {
	api  Files
	cred files.Credentials
}

// Fetch implements [loop.Fetcher].
func (b boundFiles) Fetch(ctx context.Context, fileID string) (string, io.ReadCloser, error) {
	return b.api.Fetch(ctx, b.cred, fileID)
}

// defaultFiles is the Files API at base, called with client (nil: the files package's own).
func defaultFiles(client files.Doer) func(base string) Files {
	return func(base string) Files {
		if client == nil {
			return &files.API{Base: base}
		}
		return &files.API{Base: base, Client: client}
	}
}
