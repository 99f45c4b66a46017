package processor

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"

	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// A small Chat request that repeats the assistant message of a mixed turn hundreds of times
// gets the pending code call once: the server put it after every repeat (a 92 KiB request
// became 562 MB).
func TestChatReplayRepeatsGetPendingCallOnce(t *testing.T) {
	output := strings.Repeat("o", 32<<10)
	ts := mixedTurn(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"q"}],"tools":[{"type":"code_interpreter"}]}`,
		mixedChat, []store.PendingCall{{CallID: "call_ci", Arguments: `{"code":"print('o'*32768)"}`, Output: output}})
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"user","content":"q"}`)
	const repeats = 300
	for range repeats {
		b.WriteString(`,{"role":"assistant","tool_calls":[{"id":"call_w","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_w","content":"sunny"}`)
	}
	b.WriteString(`]}`)
	give := b.String()

	ex := ts.open(t)
	ex.send(postHeaders("/v1/chat/completions"))
	resp := ex.send(reqBody(give))
	got := resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody()
	require.NotNil(t, got, "the replay of %d repeats gets the code call back", repeats)
	assert.Equal(t, 1, strings.Count(string(got), `"tool_call_id":"call_ci"`), "the pending call is put in once, not after each of %d repeats", repeats)
	assert.Less(t, len(got), len(give)+len(output)+1024, "the %d-byte request grows by one output", len(give))
}

// A compressed first answer that inflates beyond max_response_bytes is refused while it is
// inflated, with an API-shaped 502, whatever the accepted content-encoding; one within the
// bound is decoded.
func TestCompressedAnswerIsBounded(t *testing.T) {
	compress := map[string]func(io.Writer) io.WriteCloser{
		"gzip":          func(w io.Writer) io.WriteCloser { zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed); return zw },
		"deflate":       func(w io.Writer) io.WriteCloser { zw, _ := zlib.NewWriterLevel(w, zlib.BestSpeed); return zw },
		"deflate (raw)": func(w io.Writer) io.WriteCloser { zw, _ := flate.NewWriter(w, flate.BestSpeed); return zw },
	}
	pack := func(name string, b []byte) []byte {
		var zb bytes.Buffer
		zw := compress[name](&zb)
		_, err := zw.Write(b)
		require.NoError(t, err, "compress with %s", name)
		require.NoError(t, zw.Close(), "compress with %s", name)
		return zb.Bytes()
	}
	bomb := make([]byte, 16<<20) // 16 MiB of zeros: 16 KiB compressed, 16 times the bound
	bombs := map[string][]byte{}
	for name := range compress {
		bombs[name] = pack(name, bomb)
	}
	bombs["x-gzip"] = bombs["gzip"]
	for name, packed := range bombs {
		encoding := strings.TrimSuffix(name, " (raw)")
		packer := strings.Replace(name, "x-gzip", "gzip", 1)
		t.Run(name, func(t *testing.T) {
			fl := &fakeLoop{resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)}}
			ts := newTestServer(t, func(c *configv1.Config) { c.MaxResponseBytes = 1 << 20 }, fl, nil)

			ex := ts.open(t)
			ex.send(postHeaders("/v1/responses"))
			ex.send(reqBody(toolBody))
			ex.send(respHeaders(":status", "200", "content-encoding", encoding))
			resp := ex.send(respBody(packed))
			ir := resp.GetImmediateResponse()
			require.NotNil(t, ir, "%s: a 16 MiB answer inflated past 1 MiB is refused", name)
			assert.Equal(t, 502, int(ir.GetStatus().GetCode()), "%s: status", name)
			assert.Equal(t, "upstream_response_too_large", gjson.GetBytes(ir.GetBody(), "error.code").String(), "%s: OpenAI error shape: %s", name, ir.GetBody())
			assert.Empty(t, fl.requests(), "%s: the loop never saw the answer", name)

			ex = ts.open(t)
			ex.send(postHeaders("/v1/responses"))
			ex.send(reqBody(toolBody))
			ex.send(respHeaders(":status", "200", "content-encoding", encoding))
			ex.send(respBody(pack(packer, []byte(`{"id":"resp_0"}`))))
			require.Len(t, fl.requests(), 1, "%s: an answer within the bound reaches the loop", name)
			assert.Equal(t, `{"id":"resp_0"}`, string(fl.requests()[0].First), "%s: decoded", name)
		})
	}
}

// An answer larger than one ext_proc message may carry (max_request_bytes, the gRPC send limit)
// is never sent: the client gets a 502 in OpenAI's error shape instead of Envoy's bare 500.
func TestAnswerBeyondSendLimitIs502(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 2<<20)
	fl := &fakeLoop{calls: true, resp: loop.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: big, Stop: loop.StopDone}}
	ts := newTestServer(t, func(c *configv1.Config) { c.MaxRequestBytes = 1 << 20; c.DefaultProfile.MaxOutputBytes = 256 << 10 }, fl, nil)
	ex := ts.open(t)
	ex.send(postHeaders("/v1/responses"))
	ex.send(reqBody(toolBody))
	ex.send(respHeaders(":status", "200"))
	require.NoError(t, ex.stream.Send(respBody([]byte(`{}`))))
	var ir *extprocv3.ImmediateResponse
	for ir == nil {
		resp, err := ex.stream.Recv()
		require.NoError(t, err, "a 2 MiB answer with a 1 MiB send limit")
		ir = resp.GetImmediateResponse()
		require.True(t, ir != nil || resp.GetOverrideMessageTimeout() != nil, "only the timeout extension comes before the answer: %v", resp)
	}
	assert.Equal(t, 502, int(ir.GetStatus().GetCode()), "status")
	assert.Equal(t, "answer_too_large", gjson.GetBytes(ir.GetBody(), "error.code").String(), "OpenAI error shape: %s", ir.GetBody())
}
