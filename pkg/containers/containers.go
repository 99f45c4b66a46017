// Package containers serves OpenAI's Containers API — /v1/containers and their files — over the
// containers codeinterp keeps for its callers, so that the SDKs' client.containers calls work
// against codeinterp as they do against OpenAI: create, list, retrieve and delete containers;
// upload files into them (multipart, or by the id of a file of the upstream's Files API), list,
// retrieve, delete and download them.
//
// The package is HTTP only: what a container is, where its files live and how long it lives
// belong to the [Store] it is given. Every call is scoped by the caller's identity (the same
// identity the code_interpreter loop scopes its containers by): a container of another
// identity is unknown, a 404, never a 403 that would tell it exists. Uploads and downloads
// stream between the client and the store; no whole file is held in memory.
package containers

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// Container is a container as the API shows it.
type Container struct {
	// ID is the container's id, "cntr_…".
	ID string
	// Name is the name it was created with (empty for a container the loop created).
	Name string
	// CreatedAt and LastActiveAt are when it was created and last used.
	CreatedAt, LastActiveAt time.Time
	// ExpiresAfter is how long it lives idle after LastActiveAt.
	ExpiresAfter time.Duration
	// MemoryLimit is "1g", "4g", "16g" or "64g".
	MemoryLimit string
	// AllowedDomains is its network_policy's allowlist; nil when its network is disabled. Its
	// domain secrets are never shown.
	AllowedDomains []string
	// Expired reports whether it expired (it may still be listed for a while, as natively).
	Expired bool
}

// File is a file of a container.
type File struct {
	// ID is the file's id, "cfile_…".
	ID string
	// ContainerID is the container it belongs to.
	ContainerID string
	// Path is its absolute path in the container, under /mnt/data.
	Path string
	// Bytes is its size.
	Bytes int64
	// CreatedAt is when it was written.
	CreatedAt time.Time
	// Source is "user" for a file uploaded through the API or copied from file_ids, "assistant"
	// for one the code wrote.
	Source string
}

// NewContainer is what a client asks for when it creates a container.
type NewContainer struct {
	// Name is the container's name (required by the API).
	Name string
	// ExpiresAfter is its idle expiry; zero means the store's default.
	ExpiresAfter time.Duration
	// MemoryLimit is the memory limit asked for; empty means the store's default.
	MemoryLimit string
	// NetworkPolicy is the network_policy of type allowlist asked for; nil for none (no
	// network). The store refuses it where the operator has not enabled network access.
	NetworkPolicy *sandbox.NetworkPolicy
	// Skills are the skills' files mounted in the container (ResolveSkills); nil for none.
	Skills *sandbox.SkillFiles
}

// Store keeps the containers. Its methods are scoped by identity, never empty; a container of
// another identity is ErrNotFound. Every call on a container refreshes its last activity.
// Implementations must be safe for concurrent use.
type Store interface {
	// Create creates a container for identity.
	Create(ctx context.Context, identity string, c NewContainer) (Container, error)
	// List returns identity's containers, in any order.
	List(ctx context.Context, identity string) ([]Container, error)
	// Get returns one container of identity.
	Get(ctx context.Context, identity, id string) (Container, error)
	// Delete deletes one container of identity and its files.
	Delete(ctx context.Context, identity, id string) error
}

// FileStore keeps the files of a [Store]'s containers, with the same scoping.
type FileStore interface {
	// Put writes the file name (a base name) of container id from r, as a "user" file. On any
	// error nothing of it is left. r fails with [ErrTooLarge] past the upload limit, and with a
	// [SourceError] when the content cannot be read; Put's error wraps r's.
	Put(ctx context.Context, identity, id, name string, r io.Reader) (File, error)
	// Files returns the container's files, in any order.
	Files(ctx context.Context, identity, id string) ([]File, error)
	// File returns one file of the container.
	File(ctx context.Context, identity, id, fileID string) (File, error)
	// Open returns the content of one file of the container; the caller closes it.
	Open(ctx context.Context, identity, id, fileID string) (io.ReadCloser, File, error)
	// Remove deletes one file of the container.
	Remove(ctx context.Context, identity, id, fileID string) error
}

// Fetcher reads a file of the upstream's Files API with the caller's credentials, for a
// container file created by file_id. *[files.API] implements it.
type Fetcher interface {
	// Stat returns the file's name (a base name) and size. A file the upstream does not know
	// is [ErrNotFound] or [files.ErrNotFound]; a failure of the upstream is [ErrUpstream] or
	// [files.ErrUpstream].
	Stat(ctx context.Context, credentials files.Credentials, fileID string) (name string, bytes int64, err error)
	// Fetch returns the file's name and content, which the caller closes; errors as Stat's.
	Fetch(ctx context.Context, credentials files.Credentials, fileID string) (name string, content io.ReadCloser, err error)
}

var _ Fetcher = (*files.API)(nil)

// The errors a [Store], [FileStore] or [Fetcher] return for the API to map.
var (
	// ErrNotFound: no such container or file for this identity.
	ErrNotFound = errors.New("not found")
	// ErrExpired: the container expired.
	ErrExpired = errors.New("container expired")
	// ErrTooLarge: the file is over the upload limit or the container's space.
	ErrTooLarge = errors.New("file too large")
	// ErrFull: the identity (or the server) may not have another container now.
	ErrFull = errors.New("no more containers")
	// ErrUnavailable: the container could not be started, or the store failed, for now.
	ErrUnavailable = errors.New("container unavailable")
	// ErrUpstream: a file of the upstream's Files API could not be read.
	ErrUpstream = errors.New("files api failed")
)

// SourceError is an error of the content a [FileStore.Put] was copying from, not of the store:
// the client's upload broke off or was malformed (Upstream false), or the Files API's download
// broke off mid-copy (Upstream true). The reader given to Put returns its errors as
// SourceErrors; Put returns them wrapped, as it returns every error of its reader.
type SourceError struct {
	// Upstream reports whether the content came from the upstream's Files API.
	Upstream bool
	// Err is the reader's error.
	Err error
}

func (e *SourceError) Error() string {
	if e.Upstream {
		return "read the files api's content: " + e.Err.Error()
	}
	return "read the upload: " + e.Err.Error()
}

func (e *SourceError) Unwrap() error { return e.Err }

// InvalidError is a value the client sent that the store refuses (a memory limit, a name); it
// becomes a 400 naming Param.
type InvalidError struct {
	// Param is the request field, Message the explanation the client reads.
	Param, Message string
}

func (e *InvalidError) Error() string { return e.Param + ": " + e.Message }
