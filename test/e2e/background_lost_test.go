package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	respschema "github.com/codeinterp/codeinterp/pkg/schema/responses"
	"github.com/codeinterp/codeinterp/test/e2e/harness"
)

// TestBackgroundRunnerKilled: the replica running a background response dies without shutting
// down (SIGKILL, as a lost node or the OOM killer ends it) while the response's code runs. Its
// record said in_progress until stored_ttl; now its runner's lease (background_lease, 2s here)
// ends, and another replica sharing the store, read by the client, marks it failed with a
// fixed server_error, and its resumed stream ends with response.failed.
// The runner is bin/extproc as a process of its own (role all) behind its own real Envoy; the
// reader a replica of a [Fleet] on the same Redis.
func TestBackgroundRunnerKilled(t *testing.T) {
	began := time.Now()
	bin := buildServer(t)
	t.Logf("built in %v", time.Since(began).Round(100*time.Millisecond))
	const lease = 2 * time.Second
	o := FleetOptions{Replicas: true, Gateways: 1, Configure: func(c *configv1.Config) { c.BackgroundLease = durationpb.New(lease) }}
	f := NewFleet(t, o)
	m := newModel(t, f.Model)

	cfg := f.config(o, config.RoleAll, "replica-doomed")
	cfg.Listen, cfg.AdminListen, cfg.SandboxListen = freeAddr(t), freeAddr(t), freeAddr(t)
	api := freeAddr(t)
	cfg.ApiListen = proto.String(api)
	envoy := harness.StartReal(t, harness.Options{
		ExtProcAddr: cfg.Listen, Upstream: f.Model.URL(),
		Clusters: map[string]string{APICluster: "http://" + api},
	})
	cfg.Upstream = envoy.URL()
	kill := startKillable(t, bin, cfg.GetNodeId(), "http://"+cfg.GetAdminListen()+"/readyz", protojsonOf(t, cfg))

	t.Logf("started in %v", time.Since(began).Round(100*time.Millisecond))
	const key = "sk-bg-killed"
	marker := "e2e-bglost"
	m.script(responsesPath, responsesReply(usage(1, 1), runCode("call_lost", sleepyCode(marker, 120))))
	runner := frontClient(t, envoy, key)
	created, err := runner.Responses.New(t.Context(), askBackground("sleep, then die"))
	require.NoError(t, err, "create on the doomed replica")
	require.Equal(t, responses.ResponseStatusQueued, created.Status, "%s", created.RawJSON())
	waitMarked(t, marker, nil, "the background response's code")
	reader := f.Stack().Client(key)
	before, err := reader.Responses.Get(t.Context(), created.ID, responses.ResponseGetParams{})
	require.NoError(t, err, "GET on the other replica")
	require.Equal(t, responses.ResponseStatusInProgress, before.Status, "while it runs: %s", before.RawJSON())
	time.Sleep(lease + lease/2)
	during, err := reader.Responses.Get(t.Context(), created.ID, responses.ResponseGetParams{})
	require.NoError(t, err, "GET on the other replica")
	require.Equal(t, responses.ResponseStatusInProgress, during.Status, "a lease and a half later, renewed: %s", during.RawJSON())

	// A stream that waits, on the other replica, for the rest of the response.
	type follow struct {
		types []string
		err   error
	}
	followed := make(chan follow, 1)
	go func() {
		s := reader.Responses.GetStreaming(t.Context(), created.ID, responses.ResponseGetParams{StartingAfter: openai.Int(1)})
		var f follow
		for s.Next() {
			f.types = append(f.types, s.Current().Type)
		}
		f.err = s.Err()
		followed <- f
	}()

	kill()
	killed := time.Now()

	got := pollUntil(t, reader, created.ID)
	lost := time.Since(killed)
	assert.Equal(t, responses.ResponseStatusFailed, got.Status, "after the lease: %s", got.RawJSON())
	assert.Equal(t, "server_error", string(got.Error.Code), "the error's code: %s", got.RawJSON())
	assert.Equal(t, respschema.BackgroundLostMessage, got.Error.Message, "the error's message: %s", got.RawJSON())
	assert.Equal(t, created.ID, got.ID, "the response keeps its id")
	assert.LessOrEqual(t, lost, lease+3*time.Second, "failed within the lease and a poll")
	t.Logf("background response failed %v after its runner was killed", lost.Round(100*time.Millisecond))

	select {
	case f := <-followed:
		require.NoError(t, f.err, "the waiting stream")
		require.NotEmpty(t, f.types, "the waiting stream has events")
		assert.Equal(t, "response.failed", f.types[len(f.types)-1], "the waiting stream ends with response.failed: %v", f.types)
	case <-time.After(clientBound):
		require.Fail(t, "the waiting stream did not end after the lease")
	}

	stream := reader.Responses.GetStreaming(t.Context(), created.ID, responses.ResponseGetParams{StartingAfter: openai.Int(1)})
	var types []string
	for stream.Next() {
		types = append(types, stream.Current().Type)
	}
	require.NoError(t, stream.Err(), "the resumed stream")
	require.NotEmpty(t, types, "the resumed stream has events")
	assert.Equal(t, "response.failed", types[len(types)-1], "the resumed stream ends with response.failed: %v", types)

	again, err := reader.Responses.Cancel(t.Context(), created.ID)
	e := apiError(t, err, "cancel of the lost response")
	assert.Equal(t, http.StatusBadRequest, e.StatusCode, "cancel of a failed response: %s", errorView(e))
	assert.Nil(t, again)
	assert.Eventually(t, func() bool { return len(processesNamed(marker)) == 0 }, 30*time.Second, 50*time.Millisecond,
		"the sandbox's processes died with the runner")
	assert.Zero(t, m.pending(), "every scripted answer was used")
}

// protojsonOf is cfg as the JSON the YAML loader reads (defaults left to the process).
func protojsonOf(t *testing.T, cfg proto.Message) []byte {
	t.Helper()
	js, err := protojson.Marshal(cfg)
	require.NoError(t, err, "marshal the configuration")
	return js
}

// startKillable runs bin with the configuration js until the test ends (t.Cleanup kills it
// if it still runs) and waits until ready answers 200. kill ends it with SIGKILL and waits
// for it; idempotent.
func startKillable(t *testing.T, bin, name, ready string, js []byte) (kill func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	require.NoError(t, os.WriteFile(path, js, 0o600), "write %s's configuration", name)
	logs := &harness.SyncBuffer{}
	cmd := exec.Command(bin, "--config", path)
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start(), "start %s", name)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	kill = func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	t.Cleanup(func() {
		kill()
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, logs.String())
		}
	})
	deadline := time.Now().Add(serverStartBound)
	for {
		if resp, err := http.Get(ready); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return kill
			}
		}
		select {
		case <-exited:
			require.Fail(t, name+" exited before it was ready", "%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "%s is ready (%s) within %v", name, strconv.Quote(ready), serverStartBound)
	}
}
