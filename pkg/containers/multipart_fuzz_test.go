package containers

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/zap"
)

// FuzzUploadMultipart sends arbitrary multipart bodies to POST /v1/containers/{id}/files.
// Whatever the body, the answer is a success naming a file whose name a file can have in
// /mnt/data, or a 4xx in OpenAI's error shape; never a 5xx, never more than the limit kept.
func FuzzUploadMultipart(f *testing.F) {
	seed := func(name, field string, content []byte) []byte {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		_ = w.SetBoundary("fuzzboundary")
		if name == "" {
			fw, _ := w.CreateFormField(field)
			_, _ = fw.Write(content)
		} else {
			fw, _ := w.CreateFormFile(field, name)
			_, _ = fw.Write(content)
		}
		_ = w.Close()
		return b.Bytes()
	}
	f.Add("fuzzboundary", seed("data.csv", "file", []byte("a,b\n1,2\n")))
	f.Add("fuzzboundary", seed("../../etc/passwd", "file", []byte("x")))
	f.Add("fuzzboundary", seed(`C:\Users\x\report.txt`, "file", nil))
	f.Add("fuzzboundary", seed("..", "file", []byte("x")))
	f.Add("fuzzboundary", seed("", "file_id", []byte("file-abc")))
	f.Add("fuzzboundary", seed("a\x00b", "file", []byte("x")))
	f.Add("fuzzboundary", seed(strings.Repeat("n", 300), "file", []byte("x")))
	f.Add("fuzzboundary", seed("big.bin", "file", bytes.Repeat([]byte("z"), 5000)))
	f.Add("other", []byte("--other\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nx"))
	f.Add("", []byte("not multipart"))

	st := newMemStore()
	h := New(st, st, Config{
		Identify:       func(r *http.Request) (string, error) { return r.Header.Get("Authorization"), nil },
		Log:            zap.NewNop(),
		MaxUploadBytes: 4096,
	})
	const key = "Bearer fuzz"
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/containers", strings.NewReader(`{"name":"fuzz"}`))
	req.Header.Set("Authorization", key)
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		f.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	var created struct{ ID string }
	if err := json.Unmarshal(rec.Body.Bytes(), &created); err != nil || created.ID == "" {
		f.Fatalf("create: %s", rec.Body)
	}

	f.Fuzz(func(t *testing.T, boundary string, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/containers/"+created.ID+"/files", bytes.NewReader(body))
		req.Header.Set("Authorization", key)
		req.Header.Set("Content-Type", "multipart/form-data; boundary="+boundary)
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code == http.StatusOK:
			var file struct {
				Path  string
				Bytes int64
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &file); err != nil {
				t.Fatalf("a success that is not a file: %s", rec.Body)
			}
			dir, name := path.Split(file.Path)
			if dir != "/mnt/data/" || name == "" || name == "." || name == ".." || len(name) > 255 ||
				strings.ContainsRune(name, 0) || !utf8.ValidString(name) {
				t.Fatalf("stored at %q", file.Path)
			}
			if file.Bytes > 4096 {
				t.Fatalf("kept %d bytes, over the limit", file.Bytes)
			}
		case rec.Code >= 400 && rec.Code < 500:
			var e struct {
				Error struct{ Message, Type string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" {
				t.Fatalf("%d without OpenAI's error shape: %s", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}
