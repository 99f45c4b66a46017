package containers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// llamaServer is an upstream like llama.cpp's llama-server started with --api-key key: GET
// /v1/models is public (any key, or none, is a 200), GET /props takes the key only.
func llamaServer(t *testing.T, calls *atomic.Int32, key string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		switch {
		case r.URL.Path == "/v1/models":
			_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
		case r.Header.Get("Authorization") != "Bearer "+key:
			http.Error(w, `{"error":{"message":"Invalid API Key","type":"authentication_error"}}`, http.StatusUnauthorized)
		case r.URL.Path == "/props" && r.Method == http.MethodGet:
			_, _ = w.Write([]byte(`{}`))
		default:
			http.Error(w, "not found", http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestVerifierConfiguredCheck: where GET /v1/models is public (llama.cpp), the default check
// takes a made-up key (issue 23, item 3); the configured check refuses it and takes the real one.
func TestVerifierConfiguredCheck(t *testing.T) {
	var calls atomic.Int32
	up := llamaServer(t, &calls, "sk-real")

	open := newFixture(t, Config{Verify: (&Verifier{Base: up.URL, Client: up.Client()}).Verify})
	status, body := post(t, open, "made-up", "/v1/containers", "application/json", `{"name":"x"}`)
	require.Equal(t, http.StatusOK, status, "the default check is fooled by a public /v1/models: %s", body)

	f := newFixture(t, Config{Verify: (&Verifier{Base: up.URL, Client: up.Client(), Path: "/props"}).Verify})
	status, body = post(t, f, "made-up", "/v1/containers", "application/json", `{"name":"x"}`)
	assert.Equal(t, http.StatusUnauthorized, status, "a made-up key: %s", body)
	assert.Equal(t, "invalid_api_key", gjson.Get(body, "error.code").String(), "code: %s", body)
	assert.Zero(t, f.store.count("Bearer made-up"), "a made-up key gets no container")
	status, body = post(t, f, "sk-real", "/v1/containers", "application/json", `{"name":"x"}`)
	assert.Equal(t, http.StatusOK, status, "the real key: %s", body)
}

// TestVerifierCheckShape: the check is sent as configured (method, path with query, body, fixed
// headers, the caller's credential over a fixed one), and its statuses are read as configured.
func TestVerifierCheckShape(t *testing.T) {
	type seen struct{ method, uri, body, version, key, ctype string }
	got := make(chan seen, 1)
	status := atomic.Int32{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.RequestURI(), string(b), r.Header.Get("Anthropic-Version"), r.Header.Get("X-Api-Key"), r.Header.Get("Content-Type")}
		w.WriteHeader(int(status.Load()))
	}))
	t.Cleanup(up.Close)
	v := &Verifier{Base: up.URL + "/", Client: up.Client(), Method: http.MethodPost, Path: "v1/messages?beta=true", Body: "{}",
		Headers: map[string]string{"anthropic-version": "2023-06-01", "X-Api-Key": "fixed"}, AcceptStatuses: []int{400}}
	tests := []struct {
		name    string
		give    int
		wantErr error
		wantOK  bool
	}{
		{"the accepted status", 400, nil, true},
		{"a 2xx not listed cannot tell", 200, nil, false},
		{"401 refuses", 401, ErrUnauthorized, false},
		{"403 refuses", 403, ErrUnauthorized, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status.Store(int32(tt.give))
			err := v.Verify(t.Context(), fmt.Sprint("id-", i), map[string]string{"X-Api-Key": "sk-a"})
			s := <-got
			assert.Equal(t, seen{"POST", "/v1/messages?beta=true", "{}", "2023-06-01", "sk-a", "application/json"}, s, "the check as sent")
			switch {
			case tt.wantOK:
				assert.NoError(t, err, "status %d", tt.give)
			case tt.wantErr != nil:
				assert.ErrorIs(t, err, tt.wantErr, "status %d", tt.give)
			default:
				assert.Error(t, err, "status %d", tt.give)
				assert.NotErrorIs(t, err, ErrUnauthorized, "status %d cannot tell", tt.give)
			}
		})
	}
}

// TestIdentifyRefused: a request whose identity cannot be told is a 400 in the API's error shape.
func TestIdentifyRefused(t *testing.T) {
	f := newFixture(t, Config{Identify: func(*http.Request) (string, error) {
		return "", errors.New("the request carries more than one API key")
	}})
	status, body := post(t, f, "sk-a", "/v1/containers", "application/json", `{"name":"x"}`)
	assert.Equal(t, http.StatusBadRequest, status, "status: %s", body)
	assert.Equal(t, "invalid_credentials", gjson.Get(body, "error.code").String(), "code: %s", body)
	assert.Contains(t, gjson.Get(body, "error.message").String(), "more than one API key", "message: %s", body)
}

// TestCredentialHeadersChecked: a configured credential header reaches the key check.
func TestCredentialHeadersChecked(t *testing.T) {
	got := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("X-Litellm-Api-Key")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(up.Close)
	f := newFixture(t, Config{CredentialHeaders: []string{"x-litellm-api-key"},
		Verify: (&Verifier{Base: up.URL, Client: up.Client()}).Verify})
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/containers", nil)
	require.NoError(t, err, "request")
	req.Header.Set("Authorization", "Bearer sk-a")
	req.Header.Set("X-Litellm-Api-Key", "sk-a")
	resp, err := f.srv.Client().Do(req)
	require.NoError(t, err, "list")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "list")
	assert.Equal(t, "sk-a", <-got, "the check carries x-litellm-api-key")
}

// TestStalledUploadEnds: an upload that stops sending (issue 23, item 3: one byte now and then
// kept a container pinned indefinitely) is ended by the idle deadline; it leaves nothing and
// frees its upload slot.
func TestStalledUploadEnds(t *testing.T) {
	f := newFixture(t, Config{UploadIdle: 200 * time.Millisecond, MaxUploadsPerIdentity: 1})
	c, err := f.store.Create(t.Context(), "Bearer sk-a", NewContainer{Name: "c"})
	require.NoError(t, err, "create")

	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	require.NoError(t, err, "dial")
	defer conn.Close()
	head := "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\n\r\nsome bytes"
	_, err = fmt.Fprintf(conn, "POST /v1/containers/%s/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-a\r\n"+
		"Content-Type: multipart/form-data; boundary=B\r\nContent-Length: 100000\r\n\r\n%s", c.ID, head)
	require.NoError(t, err, "send the start of an upload")
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)), "deadline")
	answer, _ := io.ReadAll(conn) // the server answers and closes the connection
	assert.Less(t, time.Since(start), 5*time.Second, "the stalled upload ended by the idle deadline: %q", answer)
	assert.True(t, strings.HasPrefix(string(answer), "HTTP/1.1 408 "), "a 408: %q", answer)
	assert.Contains(t, string(answer), `"upload_timeout"`, "the error's code: %q", answer)

	require.Eventually(t, func() bool {
		f.handler.uploadCount.mu.Lock()
		none := f.handler.uploadCount.n["Bearer sk-a"] == 0
		f.handler.uploadCount.mu.Unlock()
		f.handler.mu.Lock()
		defer f.handler.mu.Unlock()
		return none && f.handler.uploading["Bearer sk-a"] == 0
	}, 5*time.Second, 10*time.Millisecond, "the upload's slot and bytes are given back")
	files, err := f.store.Files(t.Context(), "Bearer sk-a", c.ID)
	require.NoError(t, err, "files")
	assert.Empty(t, files, "nothing of the stalled upload is left")

	status, body := upload(t, f, "sk-a", c.ID, "b.txt", "hello")
	assert.Equal(t, http.StatusOK, status, "the next upload of the identity: %s", body)
}

// TestUploadingBytesPerIdentity: an identity's uploads in progress together write at most
// MaxUploadingBytesPerIdentity; the bytes are given back when an upload ends.
func TestUploadingBytesPerIdentity(t *testing.T) {
	f := newFixture(t, Config{MaxUploadBytes: 1000, MaxUploadingBytesPerIdentity: 1500})
	c, err := f.store.Create(t.Context(), "Bearer sk-a", NewContainer{Name: "c"})
	require.NoError(t, err, "create")

	// One upload holds 900 bytes and stalls, as a second of 900 arrives.
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/containers/"+c.ID+"/files", pr)
		req.Header.Set("Authorization", "Bearer sk-a")
		req.Header.Set("Content-Type", "multipart/form-data; boundary=B")
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	_, err = io.WriteString(pw, "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\n\r\n"+strings.Repeat("a", 900))
	require.NoError(t, err, "the first upload's bytes")
	require.Eventually(t, func() bool {
		f.handler.mu.Lock()
		defer f.handler.mu.Unlock()
		return f.handler.uploading["Bearer sk-a"] >= 900
	}, 5*time.Second, time.Millisecond, "the first upload's bytes are counted")

	status, body := upload(t, f, "sk-a", c.ID, "b.bin", strings.Repeat("b", 900))
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, "past the identity's bound: %s", body)
	status, body = upload(t, f, "sk-other", mustCreate(t, f, "Bearer sk-other"), "b.bin", strings.Repeat("b", 900))
	assert.Equal(t, http.StatusOK, status, "another identity is not charged: %s", body)

	_, _ = io.WriteString(pw, "\r\n--B--\r\n")
	pw.Close()
	assert.Equal(t, http.StatusOK, <-done, "the first upload completes")
	status, body = upload(t, f, "sk-a", c.ID, "c.bin", strings.Repeat("c", 900))
	assert.Equal(t, http.StatusOK, status, "the bytes were given back: %s", body)
}

func mustCreate(t *testing.T, f *fixture, identity string) string {
	t.Helper()
	c, err := f.store.Create(t.Context(), identity, NewContainer{Name: "c"})
	require.NoError(t, err, "create for %s", identity)
	return c.ID
}

// upload posts content as file name of container id, multipart.
func upload(t *testing.T, f *fixture, key, id, name, content string) (int, string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	part, err := mw.CreateFormFile("file", name)
	require.NoError(t, err, "file part")
	_, _ = part.Write([]byte(content))
	require.NoError(t, mw.Close(), "close multipart")
	return post(t, f, key, "/v1/containers/"+id+"/files", mw.FormDataContentType(), body.String())
}
