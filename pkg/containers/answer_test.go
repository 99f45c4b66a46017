package containers

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAnswerDoesNotWaitForTheBody: a call answered before its body arrived (a refusal of an
// upload whose client then stalls) is answered at once and its connection closed, where Go's
// server would first wait for up to 256 KiB more of the body; a call whose body was read whole
// keeps its connection.
func TestAnswerDoesNotWaitForTheBody(t *testing.T) {
	st := newMemStore()
	cfg := Config{Identify: func(*http.Request) (string, error) { return "me", nil }}
	h, af := New(st, st, cfg), NewAnthropicFiles(st, st, cfg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if af.Serves(r) {
			af.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	// A stalled upload refused before its body is read: to a container that is not there, or
	// where this server takes no uploads.
	for _, c := range []struct{ name, path, headers string }{
		{"Containers API", "/v1/containers/cntr_none/files", ""},
		{"Anthropic Files API", "/v1/files", "anthropic-version: 2023-06-01\r\nx-api-key: k\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", host)
			require.NoError(t, err, "dial")
			defer conn.Close()
			stall(t, conn, host, c.path, c.headers)
			// Without the guard the answer waits for the body, here for ever: the deadline
			// only keeps a broken build from hanging the suite.
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err, "an answer while the body stalls")
			body, _ := io.ReadAll(resp.Body)
			assert.Equal(t, http.StatusNotFound, resp.StatusCode, "refused: %s", body)
			assert.True(t, resp.Close, "the connection is closed after the answer")
		})
	}

	t.Run("a client still sending reads the answer", func(t *testing.T) {
		// Past its limit the upload is refused while the client still sends: it must read
		// the 413, not a reset, whatever the timing.
		small := New(st, st, Config{Identify: cfg.Identify, MaxUploadBytes: 1 << 10})
		srv := httptest.NewServer(small)
		t.Cleanup(srv.Close)
		made, err := st.Create(t.Context(), "me", NewContainer{Name: "x"})
		require.NoError(t, err, "create")
		for i := range 5 {
			body := "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\n\r\n" +
				strings.Repeat("x", 8<<20) + "\r\n--B--\r\n"
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/containers/"+made.ID+"/files", strings.NewReader(body))
			require.NoError(t, err, "request")
			req.Header.Set("Content-Type", "multipart/form-data; boundary=B")
			resp, err := srv.Client().Do(req)
			require.NoError(t, err, "upload %d: an answer, not a reset", i)
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "upload %d: %s", i, out)
		}
	})

	t.Run("a body read whole keeps the connection", func(t *testing.T) {
		conn, err := net.Dial("tcp", host)
		require.NoError(t, err, "dial")
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
		br := bufio.NewReader(conn)
		for i := range 2 {
			body := `{"name":"kept"}`
			_, err := fmt.Fprintf(conn, "POST /v1/containers HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", host, len(body), body)
			require.NoError(t, err, "request %d", i)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err, "answer %d on the same connection", i)
			out, _ := io.ReadAll(resp.Body)
			assert.Equal(t, http.StatusOK, resp.StatusCode, "create %d: %s", i, out)
			assert.False(t, resp.Close, "create %d keeps the connection", i)
		}
	})
}

// stall starts a multipart upload on conn that declares 100,000 bytes and sends a few.
func stall(t *testing.T, conn net.Conn, host, path, headers string) {
	t.Helper()
	_, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: multipart/form-data; boundary=B\r\nContent-Length: 100000\r\n\r\n"+
		"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"s.bin\"\r\n\r\nsome", path, host, headers)
	require.NoError(t, err, "start an upload")
}
