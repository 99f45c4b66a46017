package containers

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// SandboxStore is the [Store] and [FileStore] of a [sandbox.Manager]'s containers: the
// containers the code_interpreter loop runs code in are the ones the API lists, and the files
// uploaded through the API are the files the code finds under /mnt/data. It is safe for
// concurrent use.
type SandboxStore struct {
	m sandbox.Service
	// limit is the largest file Put writes (the sandbox checks it while writing too).
	limit int64
}

var (
	_ Store     = (*SandboxStore)(nil)
	_ FileStore = (*SandboxStore)(nil)
)

// Sandboxes returns the store of m's containers; Put writes files of at most maxFileBytes
// (zero: no limit but the container's space).
func Sandboxes(m sandbox.Service, maxFileBytes int64) *SandboxStore {
	return &SandboxStore{m: m, limit: maxFileBytes}
}

// Create creates a lasting container for identity.
func (s *SandboxStore) Create(ctx context.Context, identity string, c NewContainer) (Container, error) {
	info, err := s.m.Create(ctx, sandbox.CreateRequest{
		Identity:     identity,
		Name:         c.Name,
		Spec:         sandbox.Spec{MemoryLimit: c.MemoryLimit, NetworkPolicy: c.NetworkPolicy, Skills: c.Skills},
		ExpiresAfter: c.ExpiresAfter,
	})
	if err != nil {
		return Container{}, storeError(err)
	}
	return container(info), nil
}

// List returns identity's containers, the expired ones the Manager still remembers included.
func (s *SandboxStore) List(ctx context.Context, identity string) ([]Container, error) {
	infos, err := s.m.Containers(ctx, identity)
	if err != nil {
		return nil, storeError(err)
	}
	out := make([]Container, len(infos))
	for i, info := range infos {
		out[i] = container(info)
	}
	return out, nil
}

// Get returns one of identity's containers; an expired one is returned, marked expired.
func (s *SandboxStore) Get(ctx context.Context, identity, id string) (Container, error) {
	info, err := s.m.Container(ctx, identity, id)
	if err != nil {
		return Container{}, storeError(err)
	}
	return container(info), nil
}

// Delete deletes one of identity's containers and its files.
func (s *SandboxStore) Delete(ctx context.Context, identity, id string) error {
	return storeError(s.m.DeleteContainer(ctx, identity, id))
}

// Put writes r to /mnt/data/<name> in container id, as a "user" file: the code finds it under
// the name the client gave it.
func (s *SandboxStore) Put(ctx context.Context, identity, id, name string, r io.Reader) (File, error) {
	info, err := s.m.PutFile(ctx, identity, id, sandbox.DataDir+"/"+name, "user", r, s.limit)
	if err != nil {
		return File{}, storeError(err)
	}
	return file(info), nil
}

// Files returns the files of container id.
func (s *SandboxStore) Files(ctx context.Context, identity, id string) ([]File, error) {
	infos, err := s.m.Files(ctx, identity, id)
	if err != nil {
		return nil, storeError(err)
	}
	out := make([]File, len(infos))
	for i, info := range infos {
		out[i] = file(info)
	}
	return out, nil
}

// File returns one file of container id.
func (s *SandboxStore) File(ctx context.Context, identity, id, fileID string) (File, error) {
	info, err := s.m.File(ctx, identity, id, fileID)
	if err != nil {
		return File{}, storeError(err)
	}
	return file(info), nil
}

// Open returns the content of one file of container id, streamed from the container; the
// caller closes it.
func (s *SandboxStore) Open(ctx context.Context, identity, id, fileID string) (io.ReadCloser, File, error) {
	rc, info, err := s.m.OpenFile(ctx, identity, id, fileID)
	if err != nil {
		return nil, File{}, storeError(err)
	}
	return rc, file(info), nil
}

// Remove deletes one file of container id.
func (s *SandboxStore) Remove(ctx context.Context, identity, id, fileID string) error {
	return storeError(s.m.DeleteFile(ctx, identity, id, fileID))
}

func container(info sandbox.ContainerInfo) Container {
	return Container{
		ID: info.ID, Name: info.Name, CreatedAt: info.CreatedAt, LastActiveAt: info.LastActiveAt,
		ExpiresAfter: info.ExpiresAfter, MemoryLimit: info.MemoryLimit, AllowedDomains: info.AllowedDomains,
		Expired: info.Status == "expired",
	}
}

func file(info sandbox.FileInfo) File {
	return File{ID: info.ID, ContainerID: info.ContainerID, Path: info.Path, Bytes: info.Bytes,
		CreatedAt: info.CreatedAt, Source: info.Source}
}

// storeError maps the sandbox's errors onto the API's, keeping the original for the log.
func storeError(err error) error {
	var se *sandbox.SpecError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return &InvalidError{Param: se.Field, Message: fmt.Sprintf("Invalid '%s' '%s': %s.", se.Field, se.Value, se.Reason)}
	case errors.Is(err, sandbox.ErrUnknownContainer), errors.Is(err, sandbox.ErrFileNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, sandbox.ErrExpiredContainer):
		return fmt.Errorf("%w: %w", ErrExpired, err)
	case errors.Is(err, sandbox.ErrFileTooLarge), errors.Is(err, ErrTooLarge):
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	case errors.Is(err, sandbox.ErrAtCapacity):
		return fmt.Errorf("%w: %w", ErrFull, err)
	case errors.Is(err, sandbox.ErrUnavailable):
		// A container that failed to start, or a registry that failed: not the caller's doing.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, sandbox.ErrInvalidPath):
		return &InvalidError{Param: "file", Message: "Invalid file name: it cannot name a file under /mnt/data."}
	default:
		return err
	}
}
