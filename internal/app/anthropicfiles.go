package app

import (
	"context"
	"errors"
	"io"
	"net/http"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/containers"
	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/identity"
)

// uploadsOf returns the store of Anthropic's uploaded files when cfg has codeinterp own them
// (anthropic_files.own_uploads), nil when the model provider keeps them. Owned uploads live
// in this process's memory: they are refused with store "redis", where the next request may
// reach another gateway, and with an identity_header, since a container_upload's file is
// looked up by the caller's credential (see uploadFiles).
func uploadsOf(cfg *configv1.Config) (*containers.Uploads, error) {
	af := cfg.GetAnthropicFiles()
	if !af.GetOwnUploads() {
		return nil, nil
	}
	switch {
	case cfg.GetStore() == config.StoreRedis:
		return nil, errors.New("anthropic_files.own_uploads: the uploads are kept in one gateway's memory, which the other gateways of a fleet (store \"redis\") cannot read; leave them to the model provider")
	case config.Profiles(cfg)[""].IdentityHeader != "":
		return nil, errors.New("anthropic_files.own_uploads: not with an identity_header: a container_upload's file is looked up by the caller's credential")
	}
	return containers.NewUploads(containers.UploadsConfig{
		MaxFileBytes:        int64(min(af.GetMaxFileBytes(), 1<<62)),
		MaxFilesPerIdentity: int(af.GetMaxFilesPerIdentity()),
		MaxBytesPerIdentity: int64(min(af.GetMaxBytesPerIdentity(), 1<<62)),
		MaxBytes:            int64(min(af.GetMaxBytes(), 1<<62)),
	}), nil
}

// uploadFiles is the Files API a request's files are read from when codeinterp owns the
// uploads: the caller's own uploads for the "file_…" ids (a container_upload block's), the
// upstream's Files API (next) for the others (the Responses tool's container.file_ids). It
// reads them in process: natively an uploaded file cannot be downloaded, so the API listener
// does not serve its bytes.
type uploadFiles struct {
	uploads *containers.Uploads
	// identify returns the identity of a caller's credentials, as the API listener and the
	// ext_proc server tell it.
	identify func(cred files.Credentials) (string, error)
	next     admission.Files
}

var _ admission.Files = uploadFiles{}

// newUploadFiles returns admission's Files API at a base URL: uploads first, then the base's.
func newUploadFiles(uploads *containers.Uploads, hasher identity.Hasher) func(base string) admission.Files {
	identify := func(cred files.Credentials) (string, error) {
		h := http.Header{}
		for k, v := range cred {
			h.Set(k, v)
		}
		return hasher.Of(h.Values, "")
	}
	return func(base string) admission.Files {
		return uploadFiles{uploads: uploads, identify: identify, next: &files.API{Base: base}}
	}
}

// owner returns the identity whose upload fileID is; false when the id is not an upload's.
func (f uploadFiles) owner(cred files.Credentials, fileID string) (string, bool, error) {
	if !containers.IsUploadID(fileID) {
		return "", false, nil
	}
	identity, err := f.identify(cred)
	if err != nil || identity == "" {
		// A caller who cannot be told has no uploads.
		return "", true, files.ErrNotFound
	}
	return identity, true, nil
}

// Stat implements [admission.Files].
func (f uploadFiles) Stat(ctx context.Context, cred files.Credentials, fileID string) (string, int64, error) {
	identity, ours, err := f.owner(cred, fileID)
	if !ours {
		return f.next.Stat(ctx, cred, fileID)
	}
	if err != nil {
		return "", 0, err
	}
	u, err := f.uploads.File(identity, fileID)
	if err != nil {
		return "", 0, files.ErrNotFound
	}
	return u.Filename, u.Bytes, nil
}

// Fetch implements [admission.Files].
func (f uploadFiles) Fetch(ctx context.Context, cred files.Credentials, fileID string) (string, io.ReadCloser, error) {
	identity, ours, err := f.owner(cred, fileID)
	if !ours {
		return f.next.Fetch(ctx, cred, fileID)
	}
	if err != nil {
		return "", nil, err
	}
	u, rc, err := f.uploads.Open(identity, fileID)
	if err != nil {
		return "", nil, files.ErrNotFound
	}
	return u.Filename, rc, nil
}
