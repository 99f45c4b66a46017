// Package sandbox runs untrusted Python code in isolated, stateful containers.
//
// A [Provider] creates containers; a [Container] runs code, keeping its interpreter state (variables,
// imports, files under /mnt/data) between runs, until it is deleted. The [Manager] maps sandbox keys
// (ephemeral, per-session, per-container-id; all scoped by the caller's identity) to containers,
// with caps, idle TTL, leases, a warm pool and off-request-path deletion. The local backend runs one
// Python process per container under bubblewrap.
//
// Nothing here knows about LLM APIs.
package sandbox

import (
	"context"
	"errors"
)

// Errors a run or an acquire may return. Callers branch on them with errors.Is.
var (
	// ErrUnavailable means no container could be had: the backend failed to start one, or a cap
	// was reached. The code did not run.
	ErrUnavailable = errors.New("sandbox unavailable")
	// ErrLost means the container died or stopped answering during the run; its state is gone and
	// the run's result, beyond any partial output returned with the error, is lost.
	ErrLost = errors.New("sandbox lost")
	// ErrTimeout means the run exceeded its wall-clock limit and was interrupted. If the
	// interrupt did not stop it, the container was killed and the error also matches ErrLost.
	ErrTimeout = errors.New("sandbox run timed out")
	// ErrUnknownContainer means a container id is not one this manager issued to the caller's
	// identity, or it has expired or been deleted.
	ErrUnknownContainer = errors.New("unknown container")
	// ErrClosed means the manager or container has been closed.
	ErrClosed = errors.New("sandbox closed")
)

// Result is what one run shows, as a notebook cell would.
type Result struct {
	// Stdout and Stderr are the text the code wrote to its standard streams.
	Stdout string
	Stderr string
	// Value is the text form (repr, as a notebook shows it) of the value of the cell's last
	// expression; empty when the cell ends in a statement or the value is None.
	Value string
	// Error is set when the code raised.
	Error *Error
	// Images are PNG images: matplotlib figures open at the end of the run, and images the
	// code displayed.
	Images []Image
	// Files are the files under /mnt/data created or changed by the run.
	Files []File
	// Truncated reports whether output was cut at the output limit; the cut text ends with a
	// visible marker.
	Truncated bool
}

// Error is an exception raised by the code.
type Error struct {
	// Name is the exception class, for example "ZeroDivisionError".
	Name string
	// Value is str(exception).
	Value string
	// Traceback is the formatted traceback, one frame per line, naming the cell's lines.
	Traceback string
}

// Image is one image produced by a run.
type Image struct {
	// PNG holds the encoded image.
	PNG []byte
}

// File is a file under /mnt/data.
type File struct {
	// Path is the absolute path inside the container, for example "/mnt/data/out.csv".
	Path string
	// Size is its length in bytes.
	Size int64
}

// Spec describes the container to create.
type Spec struct {
	// MemoryLimit is the container's memory: "1g", "4g", "16g" or "64g". Empty means the
	// provider's default.
	MemoryLimit string
}

// Provider creates containers. Implementations are safe for concurrent use.
type Provider interface {
	// Create starts a new container. The caller owns it and must Delete it.
	Create(ctx context.Context, spec Spec) (Container, error)
}

// Container is one isolated, stateful Python interpreter.
type Container interface {
	// Run executes code and returns what it showed. Runs on one container must not overlap
	// (the Manager serializes them). On ErrTimeout or ErrLost a partial Result may accompany the
	// error.
	Run(ctx context.Context, code string) (Result, error)
	// Delete stops the container and removes its files. It is idempotent and safe to call
	// concurrently with Run (which then fails with ErrLost or ErrClosed).
	Delete(ctx context.Context) error
}
