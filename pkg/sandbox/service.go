package sandbox

import (
	"context"
	"io"
)

// Service is everything a server asks of containers: the [Manager] of this process, a sandbox
// node reached over the network, or a fleet that routes each call to the node owning the
// container. Its methods keep the contracts of the Manager's methods of the same names; an
// implementation that cannot reach the container's owner returns an error matching
// ErrUnavailable (or, for a container whose owner is gone for good, ErrLost).
type Service interface {
	Acquire(ctx context.Context, r AcquireRequest) (*Lease, error)
	CheckSpec(spec Spec) error
	Known(identity, containerID string) bool
	Create(ctx context.Context, r CreateRequest) (ContainerInfo, error)
	Container(ctx context.Context, identity, id string) (ContainerInfo, error)
	Containers(ctx context.Context, identity string) ([]ContainerInfo, error)
	DeleteContainer(ctx context.Context, identity, id string) error
	PutFile(ctx context.Context, identity, containerID, path, source string, r io.Reader, limit int64) (FileInfo, error)
	Files(ctx context.Context, identity, containerID string) ([]FileInfo, error)
	File(ctx context.Context, identity, containerID, fileID string) (FileInfo, error)
	OpenFile(ctx context.Context, identity, containerID, fileID string) (io.ReadCloser, FileInfo, error)
	DeleteFile(ctx context.Context, identity, containerID, fileID string) error
}

var _ Service = (*Manager)(nil)
