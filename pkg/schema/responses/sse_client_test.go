package responses

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
)

// TestSSEWithRealClient serves the streams over HTTP to the real openai-go client, the way the
// processor answers a client that asked for stream:true, and checks that the client's streaming
// API rebuilds the non-streaming answer.
func TestSSEWithRealClient(t *testing.T) {
	defer goleak.VerifyNone(t)

	respFinal, err := os.ReadFile(filepath.Join("testdata", "final", "responses_three_rounds", "want.json"))
	require.NoError(t, err, "read responses_three_rounds")

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := io.ReadAll(r.Body)
		if err != nil || !gjson.GetBytes(req, "stream").Bool() {
			http.Error(w, "want a streaming request", http.StatusBadRequest)
			return
		}
		var stream []byte
		switch r.URL.Path {
		case "/responses":
			stream, err = SSE(respFinal)
		default:
			http.NotFound(w, r)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(stream)
	}))
	defer srv.Close()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := openai.NewClient(
		option.WithBaseURL(srv.URL),
		option.WithAPIKey("test-key"),
		option.WithHTTPClient(&http.Client{Transport: transport}),
		option.WithMaxRetries(0),
	)

	t.Run("responses", func(t *testing.T) {
		stream := client.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
			Model: "gpt-5-nano",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Roll two dice 10,000 times.")},
		})
		var events []responses.ResponseStreamEventUnion
		for stream.Next() {
			events = append(events, stream.Current())
		}
		require.NoError(t, stream.Err(), "Responses.NewStreaming")
		r := sseReplayResponses(t, events)
		assert.Equal(t, sseOutputItems(t, respFinal), r.Rebuilt, "items rebuilt by the client")
		assert.JSONEq(t, string(respFinal), r.Terminal, "response.completed of the client stream")

		completed := events[len(events)-1].AsResponseCompleted().Response
		var want responses.Response
		require.NoError(t, json.Unmarshal(respFinal, &want), "SDK parse of the non-streaming answer")
		assert.Equal(t, finalItemLabels(want), finalItemLabels(completed), "output of response.completed")
		assert.Equal(t, want.Usage.TotalTokens, completed.Usage.TotalTokens, "usage of response.completed")
		ci := completed.Output[1].AsCodeInterpreterCall()
		require.NotEmpty(t, ci.Outputs, "outputs of the first code_interpreter_call")
		assert.Equal(t, "6.9868", ci.Outputs[0].AsLogs().Logs, "logs of the first code_interpreter_call")
		assert.Equal(t, "code_interpreter", string(completed.Tools[0].Type), "tools of response.completed")
	})

}
