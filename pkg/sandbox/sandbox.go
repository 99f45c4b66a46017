// Package sandbox runs untrusted Python code in isolated, stateful containers.
//
// A [Provider] creates containers; a [Container] runs code, keeping its interpreter state (variables,
// imports, files under /mnt/data) between runs, until it is deleted. The [Manager] maps sandbox keys
// (per-session, per-container-id, and the anonymous caller's ephemeral ones; all scoped by the
// caller's identity) to containers, as the native API keeps them: a caller with an identity keeps
// each container until it has been idle for its expiry, reusable by its id, with its files
// (uploaded, or written by the code) listed and readable; with caps, LRU eviction, leases, a warm
// pool and off-request-path deletion; a container asked to hibernate (Anthropic's lifetime) is
// instead kept on disk when idle and restored by its id (see [HibernationConfig]). The names it gives containers (owner, session key, last
// use, expiry, tombstones of expired ones) are kept in a Registry (pkg/store), which replicas
// could share. Backends are packages of their own: pkg/sandbox/local runs one Python process per
// container under bubblewrap.
//
// A run behaves like a notebook cell: the value of a trailing expression is returned as its repr
// (a trailing semicolon hides it), matplotlib figures left open or shown with plt.show() become PNG
// images, display() shows objects, and an exception comes back as name, value and a traceback that
// names the cell's lines ("<cell N>", line L).
//
// Nothing here knows about LLM APIs.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// Errors a run or an acquire may return. Callers branch on them with errors.Is.
var (
	// ErrUnavailable means no container could be had: the backend failed to start one, or a cap
	// was reached. The code did not run.
	ErrUnavailable = errors.New("sandbox unavailable")
	// ErrAtCapacity means a cap on containers was reached (see ManagerConfig's
	// MaxSessionsPerIdentity, MaxContainersPerIdentity and MaxContainers) and none could be
	// evicted to make room: all are in use. It also matches ErrUnavailable, which a failed
	// start or a Registry failure matches alone.
	ErrAtCapacity = fmt.Errorf("%w: at capacity", ErrUnavailable)
	// ErrLost means the container died or stopped answering during the run; its state is gone and
	// the run's result, beyond any partial output returned with the error, is lost.
	ErrLost = errors.New("sandbox lost")
	// ErrTimeout means the run exceeded its wall-clock limit and was interrupted
	// (KeyboardInterrupt, as a notebook does); the container and its state remain. If the
	// interrupt did not stop it, the container was killed and the error also matches ErrLost.
	ErrTimeout = errors.New("sandbox run timed out")
	// ErrUnknownContainer means a container id is not one this manager issued to the caller's
	// identity (or one it no longer remembers: see [TombstoneTTL]). Another identity's
	// container is unknown too, never told apart from one never issued.
	ErrUnknownContainer = errors.New("unknown container")
	// ErrExpiredContainer means a container id was issued to the caller's identity but has
	// expired (idle past its expiry), been evicted, lost or deleted: its state is gone.
	ErrExpiredContainer = errors.New("container expired")
	// ErrFileNotFound means there is no such container file (id or path), or it is not a
	// regular file.
	ErrFileNotFound = errors.New("container file not found")
	// ErrFileTooLarge means a file was beyond the limit it was given, /mnt/data is full, or
	// the container holds as many files as it may; nothing of it was kept.
	ErrFileTooLarge = errors.New("container file too large")
	// ErrInvalidPath means a container file path is not one a file may have: not under
	// /mnt/data, not clean, with a NUL, a component longer than 255 bytes, or a directory of
	// it that is not one. The caller's mistake.
	ErrInvalidPath = errors.New("invalid container file path")
	// ErrNoFileAccess means the sandbox backend cannot reach a container's files from the
	// server (its containers lack the [Files] ability).
	ErrNoFileAccess = errors.New("sandbox backend has no file access")
	// ErrClosed means the manager or container has been closed.
	ErrClosed = errors.New("sandbox closed")
	// ErrInvalidSpec means a container of the Spec asked for may not be created (a
	// memory_limit that is not a size, or above the operator's cap): the caller's mistake. The
	// error is a *SpecError.
	ErrInvalidSpec = errors.New("invalid container spec")
)

// SpecError is a Spec that may not be created; it matches ErrInvalidSpec.
type SpecError struct {
	// Field is the Spec's field, as the APIs name it ("memory_limit").
	Field string
	// Value is the value asked for.
	Value string
	// Reason says what is wrong, for a client ("above the largest this server allows, 16g").
	Reason string
}

func (e *SpecError) Error() string { return fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Reason) }

// Is makes a SpecError match ErrInvalidSpec.
func (e *SpecError) Is(target error) bool { return target == ErrInvalidSpec }

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
	// Files are the files under /mnt/data created or changed since the previous run ended (in
	// practice: by this run), sorted by path.
	Files []File
	// Truncated reports whether output was cut at the output limit: a cut text ends with a
	// visible note ("[output truncated: N more bytes]"); images beyond the limit, and files
	// beyond the scan limit, are left out.
	Truncated bool
	// FilesNote is a note for the model on files the run wrote that Files leaves out or that
	// got no id: a path the server refused (only a forged report has one), more files than a
	// run's list holds, a file table at its bound (see ManagerConfig.MaxFileTableBytes). It
	// is one or more bracketed sentences ("[3 files written are not listed: …]"), meant to be
	// shown as Truncated's note is; empty when nothing was left out.
	FilesNote string
	// Calls, when set, are the calls of the client's tools the run is paused for (see
	// [Resumer]): the run has not ended, and the other fields are empty.
	Calls []ToolCall
}

// AddFilesNote appends note to r's FilesNote, on a line of its own.
func (r *Result) AddFilesNote(note string) {
	if r.FilesNote != "" {
		r.FilesNote += "\n"
	}
	r.FilesNote += note
}

// Error is an exception raised by the code.
type Error struct {
	// Name is the exception class, for example "ZeroDivisionError".
	Name string
	// Value is str(exception).
	Value string
	// Traceback is the formatted traceback, as Python prints it, naming the cell's lines
	// ("<cell N>", line L); the sandbox's own frames are left out.
	Traceback string
}

// Image is one image produced by a run.
type Image struct {
	// PNG holds the encoded image.
	PNG []byte
}

// File is a file under /mnt/data.
type File struct {
	// ID is the container file id ("cfile_…") the Manager gave it; "" in a Result from a bare
	// Container.
	ID string
	// Path is the absolute path inside the container, for example "/mnt/data/out.csv".
	Path string
	// Size is its length in bytes.
	Size int64
}

// DataDir is the directory of a container's files, as the code sees it.
const DataDir = "/mnt/data"

// Spec describes the container to create.
type Spec struct {
	// MemoryLimit is the container's memory: "1g", "4g", "16g" or "64g". Empty means the
	// provider's default.
	MemoryLimit string
	// NetworkPolicy, when set, gives the container a way out: HTTP and HTTPS to the policy's
	// allowed domains only, through a proxy the backend owns (package egress). Nil means no
	// network at all. A pointer, so that a Spec stays comparable; a policy given to a Spec
	// must not change afterwards.
	NetworkPolicy *NetworkPolicy
	// Skills, when set, are skills' files mounted read-only in the container (see
	// SkillFiles). A pointer, as NetworkPolicy is; it must not change afterwards.
	Skills *SkillFiles
}

// NetworkPolicy is a container's network_policy of type allowlist, as the native API has it.
type NetworkPolicy struct {
	// AllowedDomains are the domains the code may reach: exact names, or wildcards
	// ("*.example.com") as package egress documents.
	AllowedDomains []string
	// DomainSecrets are credentials the code may use without holding them: it sees a
	// placeholder in the variable Name, which the proxy replaces with Value in HTTPS requests
	// to Domain only.
	DomainSecrets []DomainSecret
}

// DomainSecret is one of a NetworkPolicy's domain secrets. Its Value never enters the
// container, a log line or an answer.
type DomainSecret struct {
	Domain, Name, Value string
}

// String names the secret without its value, so that printing one leaks nothing.
func (s DomainSecret) String() string { return "secret " + s.Name + " for " + s.Domain }

// Provider creates containers. Implementations are safe for concurrent use.
type Provider interface {
	// Create starts a new container. ctx bounds the start only: the container lives until it
	// is deleted. The caller owns it and must Delete it.
	Create(ctx context.Context, spec Spec) (Container, error)
}

// Container is one isolated, stateful Python interpreter.
type Container interface {
	// Run executes code and returns what it showed. Runs on one container must not overlap
	// (the Manager serializes them). When ctx is done the run is interrupted; a run stopped at
	// ctx's deadline fails with ErrTimeout (also ErrLost if the container had to be killed), one
	// stopped by cancellation with ctx's error. On any error a partial Result may accompany it.
	Run(ctx context.Context, code string) (Result, error)
	// Delete stops the container and removes its files. It is idempotent and safe to call
	// concurrently with Run (which then fails with ErrLost or ErrClosed).
	Delete(ctx context.Context) error
}

// Files is the optional ability of a [Container] to reach the files under its /mnt/data from
// the server, which the Manager's file methods need. Paths are absolute container paths under
// /mnt/data (see [CleanPath]); an implementation resolves them within the container's data
// directory only, whatever the code planted there (symlinks, FIFOs, devices), and reads
// regular files only. The methods may be called concurrently with each other and with Run.
// On a deleted container they fail with ErrClosed, on a dead one with ErrLost.
type Files interface {
	// WriteFile writes r's bytes to path atomically (a temporary file in the same directory,
	// renamed over path at the end: a symlink at path is replaced, never followed), creating
	// the missing directories. It fails with ErrFileTooLarge beyond limit bytes (limit > 0)
	// or when /mnt/data is full; on any error (also r's, or ctx done) nothing of it is left.
	// The file belongs to the code's user, which may change it.
	WriteFile(ctx context.Context, path string, r io.Reader, limit int64) (FileStat, error)
	// OpenFile opens the regular file at path for reading, streamed; the caller closes it.
	// The reader ends at the FileStat's Size at most: a file the code grows while it is read
	// ends where it was when opened. Once the container is deleted, a reader still open fails
	// with ErrClosed (its descriptor would keep the deleted container's files in memory). No
	// such regular file: ErrFileNotFound.
	OpenFile(ctx context.Context, path string) (io.ReadCloser, FileStat, error)
	// StatFile returns what the regular file at path is now; ErrFileNotFound when there is
	// none.
	StatFile(ctx context.Context, path string) (FileStat, error)
	// RemoveFile removes the file at path (a symlink itself, not its target);
	// ErrFileNotFound when there is none.
	RemoveFile(ctx context.Context, path string) error
}

// FileStat is what a [Files] ability tells of a file.
type FileStat struct {
	// Size is its length in bytes.
	Size int64
	// ModTime is its last modification, which tells a file the code rewrote from the one it
	// was given.
	ModTime time.Time
}

// maxPathComponent is the longest name of one path component, as Linux allows.
const maxPathComponent = 255

// maxPath is the longest container file path, as Linux allows.
const maxPath = 4095

// CleanPath returns p as the container file path it names: absolute, clean, strictly under
// /mnt/data, without a NUL, with components of at most 255 bytes. An error matches
// ErrInvalidPath.
func CleanPath(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: a NUL in the path", ErrInvalidPath)
	}
	if !strings.HasPrefix(p, "/") {
		p = DataDir + "/" + p
	}
	c := path.Clean(p)
	rel, ok := strings.CutPrefix(c, DataDir+"/")
	if !ok || rel == "" {
		return "", fmt.Errorf("%w: not under %s", ErrInvalidPath, DataDir)
	}
	if len(c) > maxPath {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrInvalidPath, maxPath)
	}
	for _, part := range strings.Split(rel, "/") {
		if len(part) > maxPathComponent {
			return "", fmt.Errorf("%w: a component longer than %d bytes", ErrInvalidPath, maxPathComponent)
		}
	}
	return c, nil
}
