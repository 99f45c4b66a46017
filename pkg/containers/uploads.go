package containers

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// This file keeps the files clients upload through Anthropic's Files API (POST /v1/files), when
// the operator has codeinterp own them: per identity, in memory, bounded while they arrive.

// ErrQuota is an upload past what an identity, or the server in all, may keep.
var ErrQuota = errors.New("storage quota exceeded")

// Upload is one uploaded file's metadata.
type Upload struct {
	// ID is "file_…", as natively.
	ID       string
	Filename string
	MimeType string
	Bytes    int64
	// CreatedAt is when it was uploaded; ExpiresAt when it goes away, zero for never.
	CreatedAt, ExpiresAt time.Time
}

// UploadsConfig bounds an Uploads; the zero value of each field has a default.
type UploadsConfig struct {
	// MaxFileBytes bounds one file; zero means 32 MiB.
	MaxFileBytes int64
	// MaxFilesPerIdentity bounds the files one identity keeps; zero means 100.
	MaxFilesPerIdentity int
	// MaxBytesPerIdentity bounds the bytes of one identity's files, those arriving included;
	// zero means 4 × MaxFileBytes.
	MaxBytesPerIdentity int64
	// MaxBytes bounds the bytes of every identity's files together, those arriving included;
	// zero means 16 × MaxBytesPerIdentity. The files are held in memory: this is what they
	// may cost the process.
	MaxBytes int64
}

// Uploads keeps uploaded files in memory, per identity. A file counts against its identity's
// and the server's bounds from its first byte until it is deleted or expires. It is safe for
// concurrent use.
type Uploads struct {
	cfg UploadsConfig
	now func() time.Time

	// mu guards the fields below.
	mu sync.Mutex
	// files are each identity's files by id.
	files map[string]map[string]*storedUpload
	// used is the bytes each identity holds and has arriving, total the sum.
	used  map[string]int64
	total int64
}

type storedUpload struct {
	meta Upload
	data []byte
}

// NewUploads returns an empty Uploads bounded by cfg.
func NewUploads(cfg UploadsConfig) *Uploads {
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = 32 << 20
	}
	if cfg.MaxFilesPerIdentity <= 0 {
		cfg.MaxFilesPerIdentity = 100
	}
	if cfg.MaxBytesPerIdentity <= 0 {
		cfg.MaxBytesPerIdentity = 4 * cfg.MaxFileBytes
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 16 * cfg.MaxBytesPerIdentity
	}
	return &Uploads{cfg: cfg, now: time.Now, files: map[string]map[string]*storedUpload{}, used: map[string]int64{}}
}

// MaxFileBytes is the bound of one file.
func (u *Uploads) MaxFileBytes() int64 { return u.cfg.MaxFileBytes }

// newFileID is a fresh id in the native shape: "file_" and 24 base-58 characters.
func newFileID() string {
	const alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "file_011C" + string(b)
}

// IsUploadID reports whether id can be an uploaded file's id.
func IsUploadID(id string) bool {
	return strings.HasPrefix(id, "file_") && len(id) <= 64
}

// Put reads r into a new file of identity named name (a base name), typed mimeType, that
// expires after ttl (zero: never). It fails with ErrTooLarge past MaxFileBytes, with ErrQuota
// past the identity's file count or bytes or the server's bytes (each checked as the bytes
// arrive), and with r's error, leaving nothing.
func (u *Uploads) Put(ctx context.Context, identity, name, mimeType string, ttl time.Duration, r io.Reader) (Upload, error) {
	u.mu.Lock()
	u.expireLocked(identity)
	if len(u.files[identity]) >= u.cfg.MaxFilesPerIdentity {
		u.mu.Unlock()
		return Upload{}, ErrQuota
	}
	u.mu.Unlock()
	var buf bytes.Buffer
	var charged int64
	defer func() { u.charge(identity, -charged) }()
	chunk := make([]byte, 32<<10)
	for {
		if err := ctx.Err(); err != nil {
			return Upload{}, err
		}
		n, err := r.Read(chunk)
		if n > 0 {
			if int64(buf.Len()+n) > u.cfg.MaxFileBytes {
				return Upload{}, ErrTooLarge
			}
			if !u.charge(identity, int64(n)) {
				u.charge(identity, -int64(n))
				return Upload{}, ErrQuota
			}
			charged += int64(n)
			buf.Write(chunk[:n])
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Upload{}, err
		}
	}
	now := u.now()
	meta := Upload{ID: newFileID(), Filename: name, MimeType: mimeType, Bytes: int64(buf.Len()), CreatedAt: now}
	if ttl > 0 {
		meta.ExpiresAt = now.Add(ttl)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.files[identity]) >= u.cfg.MaxFilesPerIdentity {
		return Upload{}, ErrQuota // others arrived meanwhile
	}
	if u.files[identity] == nil {
		u.files[identity] = map[string]*storedUpload{}
	}
	u.files[identity][meta.ID] = &storedUpload{meta: meta, data: slices.Clip(buf.Bytes())}
	charged = 0 // the file holds the bytes now
	return meta, nil
}

// charge counts n more bytes (fewer when negative) against identity and the server, and
// reports whether both stay within their bounds.
func (u *Uploads) charge(identity string, n int64) bool {
	if n == 0 {
		return true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.used[identity] += n
	u.total += n
	if u.used[identity] <= 0 {
		delete(u.used, identity)
	}
	return u.used[identity] <= u.cfg.MaxBytesPerIdentity && u.total <= u.cfg.MaxBytes
}

// expireLocked drops identity's files past their expiry.
func (u *Uploads) expireLocked(identity string) {
	now := u.now()
	for id, f := range u.files[identity] {
		if !f.meta.ExpiresAt.IsZero() && !now.Before(f.meta.ExpiresAt) {
			u.removeLocked(identity, id)
		}
	}
}

func (u *Uploads) removeLocked(identity, id string) {
	f := u.files[identity][id]
	delete(u.files[identity], id)
	if len(u.files[identity]) == 0 {
		delete(u.files, identity)
	}
	u.used[identity] -= f.meta.Bytes
	u.total -= f.meta.Bytes
	if u.used[identity] <= 0 {
		delete(u.used, identity)
	}
}

// File returns identity's file id; ErrNotFound when identity has none such (another
// identity's file is not found either).
func (u *Uploads) File(identity, id string) (Upload, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked(identity)
	f, ok := u.files[identity][id]
	if !ok {
		return Upload{}, ErrNotFound
	}
	return f.meta, nil
}

// Open returns identity's file id and its content.
func (u *Uploads) Open(identity, id string) (Upload, io.ReadCloser, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked(identity)
	f, ok := u.files[identity][id]
	if !ok {
		return Upload{}, nil, ErrNotFound
	}
	// The bytes are never changed once kept: a reader needs no copy.
	return f.meta, io.NopCloser(bytes.NewReader(f.data)), nil
}

// Remove deletes identity's file id.
func (u *Uploads) Remove(identity, id string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked(identity)
	if _, ok := u.files[identity][id]; !ok {
		return ErrNotFound
	}
	u.removeLocked(identity, id)
	return nil
}

// List returns identity's files, the newest first.
func (u *Uploads) List(identity string) []Upload {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked(identity)
	out := make([]Upload, 0, len(u.files[identity]))
	for _, f := range u.files[identity] {
		out = append(out, f.meta)
	}
	slices.SortFunc(out, func(x, y Upload) int {
		return cmp.Or(y.CreatedAt.Compare(x.CreatedAt), strings.Compare(y.ID, x.ID))
	})
	return out
}

// expireIn sets identity's file id to expire ttl after its upload.
func (u *Uploads) expireIn(identity, id string, ttl time.Duration) (Upload, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f, ok := u.files[identity][id]
	if !ok {
		return Upload{}, ErrNotFound
	}
	f.meta.ExpiresAt = f.meta.CreatedAt.Add(ttl)
	return f.meta, nil
}
