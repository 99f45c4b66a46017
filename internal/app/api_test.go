package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// apiApp is an App over sandboxtest containers serving the Containers API on a loopback port,
// whose upstream takes the key sk-app.
func apiApp(t *testing.T, configure ...func(*configv1.Config)) (*App, string, chan error) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" && r.Header.Get("Authorization") == "Bearer sk-app" {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		http.Error(w, `{"error":{"code":"invalid_api_key"}}`, http.StatusUnauthorized)
	}))
	t.Cleanup(up.Close)
	cfg := &configv1.Config{Sandbox: &configv1.Sandbox{WarmPoolSize: proto.Uint32(0)}, Upstream: up.URL}
	config.ApplyDefaults(cfg)
	for _, c := range configure {
		c(cfg)
	}
	require.NoError(t, config.Validate(cfg), "config")
	svc, err := New(Options{Config: cfg, Provider: &sandboxtest.Provider{}, Log: zaptest.NewLogger(t)})
	require.NoError(t, err, "new app")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "listen")
	served := make(chan error, 1)
	go func() { served <- svc.ServeAPI(lis) }()
	return svc, "http://" + lis.Addr().String(), served
}

func call(t *testing.T, c *http.Client, method, url, contentType string, body io.Reader) (*http.Response, string) {
	t.Helper()
	return callAs(t, c, "sk-app", method, url, contentType, body)
}

func callAs(t *testing.T, c *http.Client, key, method, url, contentType string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err, "%s %s", method, url)
	req.Header.Set("Authorization", "Bearer "+key)
	// What an authentication filter in front would set, for a configuration that reads it.
	req.Header.Set("X-Tenant", key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.Do(req)
	require.NoError(t, err, "%s %s", method, url)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestShutdownLetsTransfersFinish: a download in progress when Shutdown starts goes on to its
// end (the manager, which it reads from, closes only after it), no new call is taken, and
// ServeAPI returns nil.
func TestShutdownLetsTransfersFinish(t *testing.T) {
	svc, base, served := apiApp(t)
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()

	resp, body := call(t, c, http.MethodPost, base+"/v1/containers", "application/json", bytes.NewReader([]byte(`{"name":"x"}`)))
	require.Equal(t, http.StatusOK, resp.StatusCode, "create: %s", body)
	id := gjson.Get(body, "id").String()
	// Larger than the loopback socket buffers, so the download's handler is still writing
	// when Shutdown starts.
	data := make([]byte, 64<<20)
	_, _ = rand.Read(data)
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, err := mw.CreateFormFile("file", "big.bin")
	require.NoError(t, err, "form")
	_, _ = fw.Write(data)
	require.NoError(t, mw.Close(), "form")
	resp, body = call(t, c, http.MethodPost, base+"/v1/containers/"+id+"/files", mw.FormDataContentType(), &form)
	require.Equal(t, http.StatusOK, resp.StatusCode, "upload: %s", body)
	fileID := gjson.Get(body, "id").String()

	req, err := http.NewRequest(http.MethodGet, base+"/v1/containers/"+id+"/files/"+fileID+"/content", nil)
	require.NoError(t, err, "download request")
	req.Header.Set("Authorization", "Bearer sk-app")
	dl, err := c.Do(req)
	require.NoError(t, err, "download")
	defer dl.Body.Close()
	first := make([]byte, 1<<10)
	_, err = io.ReadFull(dl.Body, first)
	require.NoError(t, err, "the first bytes")

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- svc.Shutdown(ctx)
	}()
	// Shutdown has begun: the listener is closed, while the download is still going.
	require.Eventually(t, func() bool {
		conn, err := net.DialTimeout("tcp", base[len("http://"):], 100*time.Millisecond)
		if err == nil {
			conn.Close()
		}
		return err != nil
	}, 5*time.Second, 10*time.Millisecond, "no new connection once Shutdown began")
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) before the download ended", err)
	default:
	}
	rest, err := io.ReadAll(dl.Body)
	require.NoError(t, err, "the rest of the download")
	assert.True(t, bytes.Equal(data, append(first, rest...)), "downloaded whole, byte for byte")
	require.NoError(t, <-stopped, "Shutdown within the grace")
	assert.NoError(t, <-served, "ServeAPI after Shutdown")
}

// TestShutdownCutsTransfersAtTheGrace: a download the client stops reading ends when the grace
// does, and Shutdown still returns, with the grace's error.
func TestShutdownCutsTransfersAtTheGrace(t *testing.T) {
	svc, base, served := apiApp(t)
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, body := call(t, c, http.MethodPost, base+"/v1/containers", "application/json", bytes.NewReader([]byte(`{"name":"x"}`)))
	require.Equal(t, http.StatusOK, resp.StatusCode, "create: %s", body)
	id := gjson.Get(body, "id").String()
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "big.bin")
	_, _ = fw.Write(make([]byte, 64<<20))
	require.NoError(t, mw.Close(), "form")
	resp, body = call(t, c, http.MethodPost, base+"/v1/containers/"+id+"/files", mw.FormDataContentType(), &form)
	require.Equal(t, http.StatusOK, resp.StatusCode, "upload: %s", body)

	req, _ := http.NewRequest(http.MethodGet, base+"/v1/containers/"+id+"/files/"+gjson.Get(body, "id").String()+"/content", nil)
	req.Header.Set("Authorization", "Bearer sk-app")
	dl, err := c.Do(req)
	require.NoError(t, err, "download")
	defer dl.Body.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = svc.Shutdown(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the grace ran out")
	assert.Less(t, time.Since(start), 15*time.Second, "Shutdown is bounded")
	_, err = io.ReadAll(dl.Body)
	assert.Error(t, err, "the stalled download was cut")
	assert.NoError(t, <-served, "ServeAPI after Shutdown")
}

// TestFilesByPrefix: a call under a prefix reads the Files API under that prefix of the
// upstream, as the ext_proc path does for a request under it.
func TestFilesByPrefix(t *testing.T) {
	of := filesByPrefix("http://up:10000/", []string{"/analyst"})
	assert.Equal(t, "http://up:10000", of("").(*files.API).Base, "no prefix")
	assert.Equal(t, "http://up:10000/analyst", of("/analyst").(*files.API).Base, "a prefix")
}

// TestAPIVerifiesCredentials: the API takes only the keys the upstream takes, unless an
// identity_header says an authentication filter in front checked them, or it is turned off.
func TestAPIVerifiesCredentials(t *testing.T) {
	tests := []struct {
		name      string
		configure func(*configv1.Config)
		wantOther int
	}{
		{"verified", func(*configv1.Config) {}, http.StatusUnauthorized},
		{"identity header", func(c *configv1.Config) { c.DefaultProfile.IdentityHeader = "x-tenant" }, http.StatusOK},
		{"turned off", func(c *configv1.Config) { c.VerifyApiCredentials = proto.Bool(false) }, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, base, served := apiApp(t, tt.configure)
			c := &http.Client{Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			resp, body := callAs(t, c, "sk-app", http.MethodPost, base+"/v1/containers", "application/json", bytes.NewReader([]byte(`{"name":"x"}`)))
			assert.Equal(t, http.StatusOK, resp.StatusCode, "a key the upstream takes: %s", body)
			resp, body = callAs(t, c, "sk-other", http.MethodPost, base+"/v1/containers", "application/json", bytes.NewReader([]byte(`{"name":"x"}`)))
			assert.Equal(t, tt.wantOther, resp.StatusCode, "a key the upstream refuses: %s", body)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, svc.Shutdown(ctx), "shutdown")
			require.NoError(t, <-served, "serve")
		})
	}
}
