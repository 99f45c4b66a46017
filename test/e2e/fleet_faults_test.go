package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// fleetFaultOptions: no warm pool, so a node's load is the containers of the conversations,
// and the node holding a conversation's container can be told apart.
var fleetFaultOptions = FleetOptions{Configure: func(c *configv1.Config) { c.Sandbox.WarmPoolSize = proto.Uint32(0) }}

// holder returns the index of the one sandbox node that holds a container, waiting (bounded)
// until one does.
func (f *Fleet) holder(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for i, n := range f.Nodes {
			if c, _ := n.App.Manager().Load(); c > 0 {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("fleet: no sandbox node holds a container")
	return -1
}

// TestFleetSandboxNodeKilledMidRun: the node running a conversation's code dies mid-run; the
// run ends as [sandbox lost …], which the model reads, and the conversation's next request
// goes on in a fresh container on the other node.
func TestFleetSandboxNodeKilledMidRun(t *testing.T) {
	f := NewFleet(t, fleetFaultOptions)
	s := f.Stack()
	m := newModel(t, s.Model)
	x := &scene{s: s, m: m, v: variants[0], mark: len(m.Requests())}
	m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_long", "import time\nv = 1\ntime.sleep(60)")),
		responsesReply(usage(1, 1), fakemodel.Message("The sandbox went away.")),
		responsesReply(usage(1, 1), runCode("call_fresh", "print('v' in globals(), 6 * 7)")),
		responsesReply(usage(1, 1), fakemodel.Message("A fresh sandbox.")))
	p := ask("run long")
	withSession(&p, "killed-node")
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		x.responses(t, "sk-fleet-kill", p)
	}()
	victim := f.holder(t)
	// The node holds the container once it is acquired, a moment before the run reaches it: a
	// node killed in that moment leaves the code not run ([sandbox unavailable …]), not lost.
	time.Sleep(time.Second)
	f.Nodes[victim].Kill()
	select {
	case <-answered:
	case <-time.After(60 * time.Second):
		t.Fatal("fleet: the request whose node died did not end")
	}
	p = ask("are you there?")
	withSession(&p, "killed-node")
	x.responses(t, "sk-fleet-kill", p)
	reqs := x.sent()
	require.Len(t, reqs, 4, "killed node: requests the model got")
	assert.Equal(t, loop.TextSandboxLost, outputOf(t, reqs[1], "call_long"), "killed node: the model is told the sandbox was lost")
	assert.Equal(t, "False 42\n", outputOf(t, reqs[3], "call_fresh"), "killed node: the next request runs in a fresh container")
	if c, _ := f.Nodes[1-victim].App.Manager().Load(); c != 1 {
		t.Errorf("killed node: the surviving node holds %d containers, want the fresh one", c)
	}
}

// TestFleetRedisDown: with Redis gone the API answers clear 503s in its shape and the loop's
// model reads [sandbox unavailable …]; nothing crashes, and once Redis is back (empty: it
// keeps nothing on disk here) conversations work again.
func TestFleetRedisDown(t *testing.T) {
	f := NewFleet(t, fleetFaultOptions)
	s := f.Stack()
	m := newModel(t, s.Model)
	f.Model.AddKey("sk-fleet-redis")

	f.Redis.Stop()
	resp, body := fleetGET(t, f.Gateways[0].Envoy.URL()+"/v1/containers", "sk-fleet-redis")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "redis down: containers list: %s", body)
	assert.NotEmpty(t, gjson.Get(body, "error.message").String(), "redis down: an error body in OpenAI's shape: %s", body)
	assert.NotContains(t, body, f.Redis.Addr(), "redis down: no internal address in the answer")

	x := &scene{s: s, m: m, v: variants[0], mark: len(m.Requests())}
	m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_down", "print(1)")),
		responsesReply(usage(1, 1), fakemodel.Message("No sandbox.")))
	p := ask("compute")
	withSession(&p, "redis-down")
	x.responses(t, "sk-fleet-redis", p)
	reqs := x.sent()
	require.Len(t, reqs, 2, "redis down: requests the model got")
	assert.True(t, strings.HasPrefix(outputOf(t, reqs[1], "call_down"), "[sandbox unavailable"),
		"redis down: the model reads that no sandbox is available: %q", outputOf(t, reqs[1], "call_down"))

	f.Redis.Restart()
	// The nodes announce themselves again within a heartbeat; until then a new container has
	// nowhere to go.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, body = fleetPOST(t, f.Gateways[1].Envoy.URL()+"/v1/containers", "sk-fleet-redis", `{"name":"back"}`)
		if resp.StatusCode == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Equal(t, http.StatusOK, resp.StatusCode, "redis back: create a container: %s", body)
	id := gjson.Get(body, "id").String()
	resp, body = fleetGET(t, f.Gateways[2].Envoy.URL()+"/v1/containers/"+id, "sk-fleet-redis")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "redis back: the container from another gateway: %s", body)
}

// TestFleetContainersAPIAcrossReplicas: a file uploaded through gateway A is read by code
// run through gateway B and downloaded through gateway C.
func TestFleetContainersAPIAcrossReplicas(t *testing.T) {
	f := NewFleet(t, FleetOptions{})
	s := f.Stack()
	m := newModel(t, s.Model)
	const key = "sk-fleet-files"
	f.Model.AddKey(key)
	a, b, c := f.Gateways[0].Envoy.URL(), f.Gateways[1].Envoy.URL(), f.Gateways[2].Envoy.URL()

	resp, body := fleetPOST(t, a+"/v1/containers", key, `{"name":"across"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "create on A: %s", body)
	id := gjson.Get(body, "id").String()
	status, body := uploadRaw(t.Context(), &Stack{Front: fixedFront(a), transport: &http.Transport{}}, key, id, "in.txt", "from A\n")
	require.Equal(t, http.StatusOK, status, "upload on A: %s", body)

	m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_read", "print(open('/mnt/data/in.txt').read().strip())\n_ = open('/mnt/data/out.txt', 'w').write('from B')")),
		responsesReply(usage(1, 1), fakemodel.Message("Read it.")))
	x := &scene{s: &Stack{Front: fixedFront(b), Model: f.Model, transport: &http.Transport{}}, m: m, v: variants[0], mark: len(m.Requests())}
	p := ask("read the file")
	p.Tools = nil
	p.Tools = append(p.Tools, containerTool(id))
	x.responses(t, key, p)
	reqs := x.sent()
	require.Len(t, reqs, 2, "code on B: requests the model got")
	assert.Equal(t, "from A\n[files written: /mnt/data/out.txt (6 bytes)]", outputOf(t, reqs[1], "call_read"), "code on B reads the file uploaded on A")

	resp, body = fleetGET(t, c+"/v1/containers/"+id+"/files", key)
	require.Equal(t, http.StatusOK, resp.StatusCode, "list on C: %s", body)
	fileID := gjson.Get(body, `data.#(path%"*out.txt").id`).String()
	require.NotEmpty(t, fileID, "list on C names the file written on B: %s", body)
	resp, body = fleetGET(t, c+"/v1/containers/"+id+"/files/"+fileID+"/content", key)
	require.Equal(t, http.StatusOK, resp.StatusCode, "download on C: %s", body)
	assert.Equal(t, "from B", body, "download on C")
}

// fixedFront is a front at one URL.
type fixedFront string

func (f fixedFront) URL() string  { return string(f) }
func (f fixedFront) Name() string { return "fixed" }

func fleetDo(t *testing.T, req *http.Request, key string) (*http.Response, string) {
	t.Helper()
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "%s %s", req.Method, req.URL)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "read %s %s", req.Method, req.URL)
	return resp, string(b)
}

func fleetGET(t *testing.T, url, key string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	require.NoError(t, err)
	return fleetDo(t, req, key)
}

func fleetPOST(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	return fleetDo(t, req, key)
}

// TestFleetGatewayKilledMidStream: a gateway dies while it streams an answer whose code is
// running; that client's stream ends (as Envoy ends it), and another conversation, through
// another gateway, is not disturbed — nor is the next request of the first one.
func TestFleetGatewayKilledMidStream(t *testing.T) {
	f := NewFleet(t, fleetFaultOptions)
	m := newModel(t, f.Model)
	m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_slow", "import time\ntime.sleep(30)")),
		// The other conversation's request, through gateway 1.
		responsesReply(usage(1, 1), runCode("call_other", "print(6 * 7)")),
		responsesReply(usage(1, 1), fakemodel.Message("42.")))
	g0 := &Stack{Front: fixedFront(f.Gateways[0].Envoy.URL()), Model: f.Model, transport: &http.Transport{}}
	g1 := &Stack{Front: fixedFront(f.Gateways[1].Envoy.URL()), Model: f.Model, transport: &http.Transport{}}

	ended := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		c := g0.Client("sk-fleet-gw")
		stream := c.Responses.NewStreaming(context.Background(), ask("run slowly"))
		defer stream.Close()
		once := false
		for stream.Next() {
			if !once {
				once = true
				close(started)
			}
		}
		if !once {
			close(started)
		}
		ended <- stream.Err()
	}()
	<-started
	f.holder(t) // the slow code runs on a node
	f.Gateways[0].Kill()
	select {
	case err := <-ended:
		// Envoy resets the stream: the client does not get a completed answer.
		assert.Error(t, err, "the stream through the killed gateway ends in an error")
	case <-time.After(60 * time.Second):
		t.Fatal("the stream through the killed gateway did not end")
	}

	x := &scene{s: g1, m: m, v: variants[1], mark: len(m.Requests())}
	got := x.responses(t, "sk-fleet-gw-other", ask("compute"))
	assert.Equal(t, "42.", got.OutputText(), "another conversation through another gateway")
}
