package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAdminPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		srv := httptest.NewServer((&App{pprof: on}).AdminHandler(prometheus.NewRegistry()))
		resp, err := http.Get(srv.URL + "/debug/pprof/heap?debug=1")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if !on {
			assert.Equal(t, http.StatusNotFound, resp.StatusCode, "off by default")
			continue
		}
		assert.Equal(t, http.StatusOK, resp.StatusCode, "admin_pprof serves the heap profile")
		assert.Contains(t, string(body), "heap profile:", "the text heap profile")
	}
}
