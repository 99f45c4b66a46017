package deploy_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// designed are the podman flags of the least privilege that gives the designed isolation with
// forked starts (docs/deploy.md): the container's capabilities are those of a user namespace of
// its own, as a Kubernetes pod's with hostUsers: false.
func designed(t *testing.T) (give, args []string) {
	t.Helper()
	give = append(userns(t), "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--cap-add", "SYS_PTRACE",
		"--security-opt", "unmask=ALL")
	return give, usernsConfig
}

// TestConversation is the README's first conversation through the image: Envoy on the host (the
// shipped envoy/envoy.yaml) → codeinterp in a container with the designed least privilege → the
// demo model, and a chart drawn with matplotlib in the image's sandbox. It reports the time from
// podman run to SERVING (gRPC health) and the latency of the first conversations.
func TestConversation(t *testing.T) {
	requirePodman(t)
	give, args := designed(t)
	listen := freeAddr(t)
	s := startServer(t, image, give, append(args, "--upstream", "http://"+listen)...)
	serving, toServing := s.wait(t, 60*time.Second)
	require.True(t, serving, "serves; logs:\n%s", s.logs(t))
	f := startFront(t, listen, s.grpc, s.api)

	logs, first := f.askSixTimesSeven(t)
	assert.Equal(t, "42\n", logs, "the first conversation's code logs")
	logs, second := f.askSixTimesSeven(t)
	assert.Equal(t, "42\n", logs, "the second conversation's code logs")
	chart, charted := f.ask(t, "Draw a chart of 3, 1, 4, 1, 5")
	var kinds []string
	for _, o := range chart.Outputs {
		kinds = append(kinds, o.Type)
	}
	assert.Contains(t, kinds, "image", "a chart's outputs: %+v", chart.Outputs)
	assert.Contains(t, chart.Code, "matplotlib", "the chart's code")
	assert.Contains(t, s.logs(t), logForked, "the server's start mode")
	t.Logf("podman run to SERVING %v; first conversation %v, second %v, a chart %v",
		toServing.Round(time.Millisecond), first.Round(time.Millisecond), second.Round(time.Millisecond), charted.Round(time.Millisecond))
}
