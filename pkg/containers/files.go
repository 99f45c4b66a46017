package containers

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/schema"
)

// This file is the container files routes of the API: uploads, copies by file_id, listings,
// downloads, and the bounds of what an upload may hold.

type fileJSON struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	ContainerID string `json:"container_id"`
	Path        string `json:"path"`
	Bytes       int64  `json:"bytes"`
	CreatedAt   int64  `json:"created_at"`
	Source      string `json:"source"`
}

func fileToJSON(f File) fileJSON {
	return fileJSON{ID: f.ID, Object: "container.file", ContainerID: f.ContainerID, Path: f.Path,
		Bytes: f.Bytes, CreatedAt: f.CreatedAt.Unix(), Source: f.Source}
}

// createFile is POST /v1/containers/{id}/files: a multipart body with the file's content
// ("file") or the id of a file of the Files API ("file_id"), or a JSON body {"file_id": …}.
func (h *Handler) createFile(c call) {
	id := c.r.PathValue("id")
	if !h.beginUpload(c.identity) {
		h.tooManyUploads(c)
		return
	}
	defer h.endUpload(c.identity)
	// The container must be there, alive, before a byte of the upload is read.
	ct, err := h.store.Get(c.r.Context(), c.identity, id)
	if err == nil && ct.Expired {
		err = ErrExpired
	}
	if err != nil {
		h.fail(c, "Container", err)
		return
	}
	mt, _, _ := mime.ParseMediaType(c.r.Header.Get("Content-Type"))
	var f File
	switch mt {
	case "multipart/form-data":
		f, err = h.createFileMultipart(c, id)
	case "application/json", "":
		var body struct {
			FileID *string `json:"file_id"`
		}
		if err = decodeJSON(c.r, &body); err == nil {
			if body.FileID == nil {
				err = &schema.RequestError{Message: "Send the file's content (multipart 'file') or a 'file_id'.", Param: "file", Code: "missing_required_parameter"}
			} else {
				f, err = h.putFetched(c, id, *body.FileID, "file_id")
			}
		}
	default:
		err = &schema.RequestError{Status: http.StatusUnsupportedMediaType, Message: "Send multipart/form-data (with 'file' or 'file_id') or application/json (with 'file_id').", Code: "unsupported_media_type"}
	}
	if err != nil {
		h.fail(c, "File", err)
		return
	}
	writeJSON(c.w, fileToJSON(f))
}

// tooManyUploads answers an upload beginUpload refused.
func (h *Handler) tooManyUploads(c call) {
	writeError(c.w, &schema.RequestError{Status: http.StatusTooManyRequests, Code: "too_many_uploads",
		Message: fmt.Sprintf("Too many uploads in progress for this API key (at most %d at once): wait for one to finish.", h.cfg.MaxUploadsPerIdentity)})
}

// createFileMultipart reads the parts in order and stores the first "file" or "file_id";
// nothing of the upload is held in memory.
func (h *Handler) createFileMultipart(c call, id string) (File, error) {
	// The multipart framing adds a little to the file; the file itself is limited by h.limit.
	c.r.Body = http.MaxBytesReader(c.w, c.r.Body, h.cfg.MaxUploadBytes+1<<20)
	mr, err := c.r.MultipartReader()
	if err != nil {
		return File{}, &schema.RequestError{Message: "The multipart body cannot be read: " + err.Error(), Code: "invalid_multipart"}
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return File{}, &schema.RequestError{Message: "Send the file's content (multipart 'file') or a 'file_id'.", Param: "file", Code: "missing_required_parameter"}
		}
		if err != nil {
			return File{}, multipartError(err)
		}
		switch part.FormName() {
		case "file":
			name, err := baseName(part.FileName())
			if err != nil {
				return File{}, err
			}
			return h.put(c, id, name, part, false)
		case "file_id":
			v, err := io.ReadAll(io.LimitReader(part, 257))
			if err != nil {
				return File{}, multipartError(err)
			}
			return h.putFetched(c, id, string(v), "file_id")
		}
	}
}

func multipartError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return ErrTooLarge
	}
	return &schema.RequestError{Message: "The multipart body cannot be read.", Code: "invalid_multipart"}
}

// baseName checks an uploaded file's name: the base name it will have under /mnt/data.
func baseName(name string) (string, error) {
	// Browsers and SDKs send the base name; some clients send a path: keep its last element.
	name = path.Base(strings.ReplaceAll(name, `\`, "/"))
	if name == "" || name == "." || name == ".." || name == "/" || len(name) > 255 ||
		strings.ContainsRune(name, 0) || !utf8.ValidString(name) {
		return "", &schema.RequestError{Message: "Invalid file name: give the file a name (at most 255 bytes of UTF-8).", Param: "file", Code: "invalid_file_name"}
	}
	return name, nil
}

// stat checks the Files API file fileID with the caller's credentials: that it exists for
// them, has a name a file can have here, and fits the upload limit.
func (h *Handler) stat(c call, fileID, param string) error {
	if err := h.checkFileID(fileID, param); err != nil {
		return err
	}
	name, size, err := h.cfg.Fetcher(c.prefix).Stat(c.r.Context(), h.cfg.credentials(c.r), fileID)
	if err != nil {
		return h.fetchError(err, fileID, param)
	}
	if _, err := baseName(name); err != nil {
		return err
	}
	if size > h.cfg.MaxUploadBytes {
		return ErrTooLarge
	}
	return nil
}

func (h *Handler) checkFileID(fileID, param string) error {
	if h.cfg.Fetcher == nil {
		return &schema.RequestError{Message: "Files by id are not available on this server.", Param: param, Code: "invalid_value"}
	}
	if fileID == "" || len(fileID) > 256 || strings.ContainsAny(fileID, "/?#%\\") || fileID == "." || fileID == ".." {
		return &schema.RequestError{Message: fmt.Sprintf("Invalid file id '%s'.", fileID), Param: param, Code: "invalid_value"}
	}
	return nil
}

// fetchError maps a Fetcher's error: a file the caller may not read is the client's 400.
func (h *Handler) fetchError(err error, fileID, param string) error {
	if errors.Is(err, ErrNotFound) || errors.Is(err, files.ErrNotFound) {
		return &schema.RequestError{Message: fmt.Sprintf("No such File object: %s", fileID), Param: param, Code: "file_not_found"}
	}
	return err
}

// putFetched copies the Files API file fileID into container id, streamed.
func (h *Handler) putFetched(c call, id, fileID, param string) (File, error) {
	if err := h.checkFileID(fileID, param); err != nil {
		return File{}, err
	}
	name, content, err := h.cfg.Fetcher(c.prefix).Fetch(c.r.Context(), h.cfg.credentials(c.r), fileID)
	if err != nil {
		return File{}, h.fetchError(err, fileID, param)
	}
	defer content.Close()
	if name, err = baseName(name); err != nil {
		return File{}, err
	}
	return h.put(c, id, name, content, true)
}

func (h *Handler) listFiles(c call) {
	p, err := readPage(c.r)
	if err != nil {
		h.fail(c, "", err)
		return
	}
	all, err := h.files.Files(c.r.Context(), c.identity, c.r.PathValue("id"))
	if err != nil {
		h.fail(c, "Container", err)
		return
	}
	items, hasMore, err := page(p, all, func(f File) (time.Time, string) { return f.CreatedAt, f.ID })
	if err != nil {
		h.fail(c, "", err)
		return
	}
	data := make([]fileJSON, len(items))
	for i, f := range items {
		data[i] = fileToJSON(f)
	}
	writeJSON(c.w, listJSON(data, hasMore, func(v fileJSON) string { return v.ID }))
}

func (h *Handler) getFile(c call) {
	f, err := h.files.File(c.r.Context(), c.identity, c.r.PathValue("id"), c.r.PathValue("file"))
	if err != nil {
		h.fail(c, "File", err)
		return
	}
	writeJSON(c.w, fileToJSON(f))
}

func (h *Handler) deleteFile(c call) {
	fileID := c.r.PathValue("file")
	if err := h.files.Remove(c.r.Context(), c.identity, c.r.PathValue("id"), fileID); err != nil {
		h.fail(c, "File", err)
		return
	}
	writeJSON(c.w, deletedJSON{ID: fileID, Object: "container.file.deleted", Deleted: true})
}

// fileContent streams a file's bytes.
func (h *Handler) fileContent(c call) {
	rc, f, err := h.files.Open(c.r.Context(), c.identity, c.r.PathValue("id"), c.r.PathValue("file"))
	if err != nil {
		h.fail(c, "File", err)
		return
	}
	defer rc.Close()
	c.w.Header().Set("Content-Type", "application/octet-stream")
	c.w.Header().Set("Content-Length", strconv.FormatInt(f.Bytes, 10))
	c.w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(f.Path)}))
	if _, err := io.Copy(c.w, rc); err != nil && c.r.Context().Err() == nil {
		// The status is out: all that is left is to cut the body short, which the length shows.
		h.log.Warn("stream a container file", zap.Error(err))
	}
}

// --- Shared ----------------------------------------------------------------------------------

// put writes file name of container id from r (upstream: r is the Files API's content). The
// reader Put gets fails with ErrTooLarge past the upload limit or past what the caller's
// uploads in progress may write together, and marks r's own errors as a SourceError. What the
// upload counted against the caller is given back when Put returns: the file is then the
// container's, bounded by its space.
func (h *Handler) put(c call, id, name string, r io.Reader, upstream bool) (File, error) {
	l := &limitReader{r: &sourceReader{r: r, upstream: upstream}, left: h.cfg.MaxUploadBytes,
		charge: func(n int64) bool { return h.chargeUpload(c.identity, n) }}
	defer func() { h.chargeUpload(c.identity, -l.charged) }()
	return h.files.Put(c.r.Context(), c.identity, id, name, l)
}

// chargeUpload counts n more bytes (fewer when negative) written by identity's uploads in
// progress, and reports whether they stay within MaxUploadingBytesPerIdentity.
func (h *Handler) chargeUpload(identity string, n int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.uploading[identity] += n
	if h.uploading[identity] <= 0 {
		delete(h.uploading, identity)
		return true
	}
	return h.uploading[identity] <= h.cfg.MaxUploadingBytesPerIdentity
}

// sourceReader marks the errors of r, but io.EOF, as a SourceError. A body past its
// http.MaxBytesReader limit is left as it is: it is a file too large, not a broken body.
type sourceReader struct {
	r        io.Reader
	upstream bool
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	var mbe *http.MaxBytesError
	if err != nil && err != io.EOF && !errors.As(err, &mbe) {
		err = &SourceError{Upstream: s.upstream, Err: err}
	}
	return n, err
}

type limitReader struct {
	r    io.Reader
	left int64
	// charge counts what was read against a bound shared with other readers, and reports
	// whether it holds; nil means none. charged is what it counted.
	charge  func(n int64) bool
	charged int64
	over    bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < 0 || l.over {
		return 0, ErrTooLarge
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.charge != nil && n > 0 {
		l.charged += int64(n)
		if !l.charge(int64(n)) {
			l.over = true
			return n, ErrTooLarge
		}
	}
	if l.left < 0 {
		return n, ErrTooLarge
	}
	return n, err
}
