package e2e

import (
	"bytes"
	"encoding/base64"
	"errors"
	"image/png"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Containers and files in the code_interpreter loop (issue 12): a container reused from the
// context, include, the files the code writes cited in the message, through the harness and
// the real Envoy, plain and streaming (the stream's events must rebuild the plain answer).
func TestFiles(t *testing.T) {
	env := NewEnv(t, EnvOptions{})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		for _, sc := range []loopScenario{
			{name: "a second request names the first answer's container", run: scenarioContainerByID},
			{name: "a continuation reuses the container of the answer it continues", run: scenarioContainerFromPrevious},
			{name: "item references to the code calls resolve (issue 24)", run: scenarioItemReference},
			{name: "outputs are null without include", run: scenarioNoInclude},
			{name: "the files the code wrote are cited", run: scenarioFilesCited},
			{name: "file_ids are copied into /mnt/data", run: scenarioFileIDs},
		} {
			t.Run(sc.name, func(t *testing.T) {
				got := map[variant]string{}
				for _, v := range variants {
					t.Run(v.String(), func(t *testing.T) {
						m.clear()
						x := &scene{s: s, m: m, v: v, mark: len(m.Requests())}
						got[v] = x.unnamed(sc.run(t, x))
						assert.Zero(t, m.pending(), "%s (%s): every scripted answer was used", sc.name, v)
					})
				}
				plain, stream := got[variants[0]], got[variants[1]]
				if plain == "" || stream == "" {
					return
				}
				assert.Equal(t, plain, stream, "%s: the streaming client reconstructs the plain answer", sc.name)
			})
		}
	})
}

func scenarioContainerByID(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_c1", "answer = 41")),
		responsesReply(usage(1, 1), fakemodel.Message("Set.")),
		responsesReply(usage(1, 1), runCode("call_c2", "print(answer + 1)")),
		responsesReply(usage(1, 1), fakemodel.Message("42.")))
	first := x.responses(t, "sk-files-a", ask("set answer"))
	id := codeCall(t, first, 0).ContainerID
	p := ask("use answer")
	p.Tools = []responses.ToolUnionParam{containerTool(id)}
	second := x.responses(t, "sk-files-a", p)

	reqs := x.sent()
	require.Len(t, reqs, 4, "container by id: requests the model got")
	assert.Equal(t, "42\n", outputOf(t, reqs[3], "call_c2"), "container by id: the first request's variable survived")
	assert.Equal(t, id, codeCall(t, second, 0).ContainerID, "container by id: the same container")
	checkNativeAnswer(t, second, "container by id")

	// Another API key cannot run code in it: the id is unknown to it.
	_, err := responsesCall(t, x.v, x.s.Client("sk-files-b"), p)
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr, "container by id: another key")
	assert.Equal(t, 404, apiErr.StatusCode, "container by id: another key's status")
	assert.Equal(t, "container_not_found", apiErr.Code, "container by id: another key's code")
	return normalized("[" + first.RawJSON() + "," + second.RawJSON() + "]")
}

func scenarioContainerFromPrevious(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_p1", "seen = 'first'")),
		responsesReply(usage(1, 1), fakemodel.Message("Noted.")),
		responsesReply(usage(1, 1), runCode("call_p2", "print(seen)")),
		responsesReply(usage(1, 1), fakemodel.Message("first")))
	first := x.responses(t, "sk-files-prev", ask("note it"))
	p := ask("what was noted?")
	p.PreviousResponseID = openai.String(first.ID)
	second := x.responses(t, "sk-files-prev", p)

	reqs := x.sent()
	require.Len(t, reqs, 4, "previous_response_id: requests the model got")
	assert.Equal(t, "first\n", outputOf(t, reqs[3], "call_p2"), "previous_response_id: the auto container is the earlier answer's")
	assert.Equal(t, codeCall(t, first, 0).ContainerID, codeCall(t, second, 0).ContainerID, "previous_response_id: one container")
	// A stream's answer echoes the previous_response_id it mapped to the upstream's; the fake
	// model echoes none in a plain one.
	raw, _ := sjson.Delete(second.RawJSON(), "previous_response_id")
	return normalized("[" + first.RawJSON() + "," + raw + "]")
}

// scenarioItemReference is the second turn as @ai-sdk/openai sends it with store on (its
// default): the earlier output items as item references, ours ("ci_…") included, which no
// upstream can resolve. The server puts back the call the model made and the output it read,
// and the auto container is the one that call ran in; a reference to another id goes on as it
// is.
func scenarioItemReference(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_r1", "kept = 'first'\nprint(6*7)")),
		responsesReply(usage(1, 1), fakemodel.Message("42.")),
		responsesReply(usage(1, 1), runCode("call_r2", "print(kept)")),
		responsesReply(usage(1, 1), fakemodel.Message("first")))
	first := x.responses(t, "sk-files-ref", ask("compute"))
	ci := codeCall(t, first, 0)
	p := ask("what was kept?")
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("compute", responses.EasyInputMessageRoleUser),
		{OfItemReference: &responses.ResponseInputItemItemReferenceParam{ID: ci.ID}},
		{OfItemReference: &responses.ResponseInputItemItemReferenceParam{ID: "msg_upstream_1"}},
		responses.ResponseInputItemParamOfMessage("what was kept?", responses.EasyInputMessageRoleUser),
	}}
	second := x.responses(t, "sk-files-ref", p)

	reqs := x.sent()
	require.Len(t, reqs, 4, "item references: requests the model got")
	in := gjson.GetBytes(reqs[2].Body, "input")
	// openai-go sends easy messages and item references without their "type", as the API allows.
	assert.Equal(t, []string{"", "function_call", "function_call_output", "", ""},
		typesOf(in), "item references: the input the model got: %s", in.Raw)
	assert.Equal(t, ci.ID, in.Get("1.call_id").String(), "item references: the call's id")
	assert.JSONEq(t, `{"code":"kept = 'first'\nprint(6*7)"}`, in.Get("1.arguments").String(), "item references: the call's code")
	assert.Equal(t, "42\n", outputOf(t, reqs[2], ci.ID), "item references: the output the model read")
	assert.Equal(t, "msg_upstream_1", in.Get("3.id").String(), "item references: another id goes on as it is")
	assert.Equal(t, "first\n", outputOf(t, reqs[3], "call_r2"), "item references: the auto container is the referenced call's")
	assert.Equal(t, ci.ContainerID, codeCall(t, second, 0).ContainerID, "item references: one container")
	return normalized("[" + first.RawJSON() + "," + second.RawJSON() + "]")
}

// typesOf returns the "type" of each element of the array v.
func typesOf(v gjson.Result) []string {
	var out []string
	for _, e := range v.Array() {
		out = append(out, e.Get("type").String())
	}
	return out
}

func scenarioNoInclude(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_n", "print(6*7)")),
		responsesReply(usage(1, 1), fakemodel.Message("42")))
	resp := x.responses(t, "sk-files-noinc", askNoOutputs("compute"))

	reqs := x.sent()
	require.Len(t, reqs, 2, "no include: requests the model got")
	assert.Equal(t, "42\n", outputOf(t, reqs[1], "call_n"), "no include: the model still reads the output")
	checkNativeAnswer(t, resp, "no include")
	assert.Equal(t, "null", gjson.Get(resp.RawJSON(), "output.0.outputs").Raw, "no include: outputs of the call: %s", resp.RawJSON())
	return normalized(resp.RawJSON())
}

// filesCode writes a cleaned CSV and a PNG chart, and leaves the figure open (an image output).
const filesCode = "import pandas as pd\nimport matplotlib.pyplot as plt\n" +
	"df = pd.DataFrame({'x': [1, 2, 3], 'y': [1, 4, 9]})\n" +
	"df.to_csv('/mnt/data/clean.csv', index=False)\n" +
	"plt.plot(df.x, df.y)\nplt.savefig('/mnt/data/chart.png')\nprint(len(df))"

// filesAnswer links the CSV as the native model does and names the chart's path, after text
// with characters beyond ASCII.
const filesAnswer = "Données nettoyées ✓ — [Download the cleaned CSV](sandbox:/mnt/data/clean.csv); the chart is /mnt/data/chart.png."

func scenarioFilesCited(t *testing.T, x *scene) string {
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_files", filesCode)),
		responsesReply(usage(1, 1), fakemodel.Message(filesAnswer)),
		responsesReply(usage(1, 1), runCode("call_show", "print(open('/mnt/data/clean.csv').read())\n"+
			"print(*open('/mnt/data/chart.png', 'rb').read()[:4][:1], open('/mnt/data/chart.png', 'rb').read()[1:4].decode())")),
		responsesReply(usage(1, 1), fakemodel.Message("Both are there.")))
	resp := x.responses(t, "sk-files-out", ask("clean the data and chart it"))

	reqs := x.sent()
	require.Len(t, reqs, 2, "files: requests the model got")
	fed := outputOf(t, reqs[1], "call_files")
	assert.Contains(t, fed, "[files written: /mnt/data/chart.png (", "files: the model is told the files written: %s", fed)
	assert.Contains(t, fed, "/mnt/data/clean.csv (16 bytes)", "files: the CSV's size: %s", fed)
	checkNativeAnswer(t, resp, "files")
	ci := codeCall(t, resp, 0)
	var images int
	for _, o := range ci.Outputs {
		if o.Type != "image" {
			continue
		}
		images++
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(o.AsImage().URL, "data:image/png;base64,"))
		require.NoError(t, err, "files: image base64")
		_, err = png.DecodeConfig(bytes.NewReader(raw))
		assert.NoError(t, err, "files: the image output is a PNG")
	}
	assert.Equal(t, 1, images, "files: image outputs of %s", ci.RawJSON())

	require.Len(t, resp.Output, 2, "files: items")
	msg := resp.Output[1]
	require.Equal(t, "message", msg.Type, "files: the message")
	anns := msg.Content[0].Annotations
	require.Len(t, anns, 2, "files: citations in %s", msg.RawJSON())
	runes := []rune(filesAnswer)
	for i, want := range []struct{ span, filename string }{
		{"[Download the cleaned CSV](sandbox:/mnt/data/clean.csv)", "clean.csv"},
		{"/mnt/data/chart.png", "chart.png"},
	} {
		a := anns[i].AsContainerFileCitation()
		assert.Equal(t, "container_file_citation", string(a.Type), "files: citation %d", i)
		assert.Equal(t, ci.ContainerID, a.ContainerID, "files: citation %d names the call's container", i)
		assert.True(t, strings.HasPrefix(a.FileID, "cfile_"), "files: citation %d's file id %q", i, a.FileID)
		assert.Equal(t, want.filename, a.Filename, "files: citation %d's filename", i)
		require.True(t, a.StartIndex >= 0 && a.StartIndex <= a.EndIndex && int(a.EndIndex) <= len(runes), "files: citation %d's span %d..%d", i, a.StartIndex, a.EndIndex)
		assert.Equal(t, want.span, string(runes[a.StartIndex:a.EndIndex]), "files: citation %d spans the link (code point indices)", i)
	}
	assert.NotEqual(t, anns[0].FileID, anns[1].FileID, "files: two files, two ids")
	// Both cited files download through the Containers API, as the code wrote them.
	client := x.s.Client("sk-files-out")
	for i, a := range anns {
		res, err := client.Containers.Files.Content.Get(t.Context(), ci.ContainerID, a.FileID)
		require.NoError(t, err, "files: download citation %d's file", i)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err, "files: read citation %d's file", i)
		if a.Filename == "clean.csv" {
			assert.Equal(t, "x,y\n1,1\n2,4\n3,9\n", string(body), "files: the CSV, byte for byte")
		} else {
			_, err := png.DecodeConfig(bytes.NewReader(body))
			assert.NoError(t, err, "files: the chart is a PNG")
		}
	}
	other := x.s.Client("sk-files-someone-else")
	_, err := other.Containers.Files.Content.Get(t.Context(), ci.ContainerID, anns[0].FileID)
	assert.Equal(t, 404, apiError(t, err, "files: another key's download").StatusCode, "files: another key cannot download")

	// The files are in the container, as the code wrote them: a request naming it reads them.
	p := ask("show the files")
	p.Tools = []responses.ToolUnionParam{containerTool(ci.ContainerID)}
	x.responses(t, "sk-files-out", p)
	// The model calls, without the Containers API's checks of the keys (GET /v1/models).
	reqs = slices.DeleteFunc(x.sent(), func(r fakemodel.Request) bool { return r.Path == "/v1/models" })
	require.Len(t, reqs, 4, "files: requests the model got")
	assert.Equal(t, "x,y\n1,1\n2,4\n3,9\n\n137 PNG\n", outputOf(t, reqs[3], "call_show"), "files: the container's files")
	return normalizedFiles(resp.RawJSON())
}

// fileIDs matches the container file ids the server mints.
var fileIDs = regexp.MustCompile(`\bcfile_[0-9a-f]{16,}\b`)

// normalizedFiles is normalized with the container file ids, minted per run, numbered too.
func normalizedFiles(raw string) string {
	n := 0
	seen := map[string]string{}
	return fileIDs.ReplaceAllStringFunc(normalized(raw), func(id string) string {
		if v, ok := seen[id]; ok {
			return v
		}
		n++
		seen[id] = "cfile_" + strings.Repeat("x", n)
		return seen[id]
	})
}

// fileIDsTool is the code_interpreter tool with an auto container and file_ids.
func fileIDsTool(ids ...string) responses.ToolUnionParam {
	return responses.ToolUnionParam{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
		Container: responses.ToolCodeInterpreterContainerUnionParam{
			OfCodeInterpreterToolAuto: &responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{FileIDs: ids},
		},
	}}
}

func scenarioFileIDs(t *testing.T, x *scene) string {
	const key = "sk-files-in"
	x.s.Model.AddFile(fakemodel.File{ID: "file-e2e-data", Filename: "input data.csv", Key: key, Content: []byte("a,b\n1,2\n")})
	x.s.Model.AddFile(fakemodel.File{ID: "file-e2e-other", Filename: "secret.txt", Key: "sk-files-someone-else", Content: []byte("no")})
	x.m.script(responsesPath,
		responsesReply(usage(1, 1), runCode("call_in", "print(open('/mnt/data/input data.csv').read(), end='')")),
		responsesReply(usage(1, 1), fakemodel.Message("Read it.")))
	p := ask("read the file")
	p.Tools = []responses.ToolUnionParam{fileIDsTool("file-e2e-data")}
	resp := x.responses(t, key, p)

	reqs := modelCalls(x)
	require.Len(t, reqs, 2, "file_ids: model calls")
	assert.Equal(t, "a,b\n1,2\n", outputOf(t, reqs[1], "call_in"), "file_ids: the file is in /mnt/data under its name")
	checkNativeAnswer(t, resp, "file_ids")

	// A file the caller's key cannot read, and one that does not exist, are refused before
	// anything goes upstream.
	for _, id := range []string{"file-e2e-other", "file-e2e-missing"} {
		p.Tools = []responses.ToolUnionParam{fileIDsTool("file-e2e-data", id)}
		_, err := responsesCall(t, x.v, x.s.Client(key), p)
		var apiErr *openai.Error
		require.ErrorAs(t, err, &apiErr, "file_ids: %s", id)
		assert.Equal(t, 400, apiErr.StatusCode, "file_ids: status for %s", id)
		assert.Equal(t, "file_not_found", apiErr.Code, "file_ids: code for %s", id)
		assert.Equal(t, "tools", apiErr.Param, "file_ids: param for %s", id)
		assert.Contains(t, apiErr.Message, id, "file_ids: the message names %s", id)
	}
	assert.Len(t, modelCalls(x), 2, "file_ids: the refused requests never reached the model")
	for _, r := range x.sent() {
		if strings.HasPrefix(r.Path, "/v1/files/") {
			assert.Equal(t, "Bearer "+key, r.Header.Get("Authorization"), "file_ids: the Files API is called with the caller's key")
		}
	}
	return normalized(resp.RawJSON())
}

// modelCalls are the scene's requests to the model's Responses API (not its Files API).
func modelCalls(x *scene) []fakemodel.Request {
	var out []fakemodel.Request
	for _, r := range x.sent() {
		if r.Path == responsesPath {
			out = append(out, r)
		}
	}
	return out
}

// TestFilesExpiredContainer: a container idle past its expiry (a second here) is refused with
// the native 400 when a request names it, and is not reused by a request that continues from
// an answer that ran in it: that request gets a new container.
func TestFilesExpiredContainer(t *testing.T) {
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.Sandbox.SessionIdleTtl = durationpb.New(time.Second)
	}})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		m := newModel(t, s.Model)
		mark := len(m.Requests())
		key := "sk-files-expire-" + s.Front.Name()
		m.script(responsesPath,
			responsesReply(usage(1, 1), runCode("call_e1", "v = 1")),
			responsesReply(usage(1, 1), fakemodel.Message("Set.")),
			responsesReply(usage(1, 1), runCode("call_e2", "print('v' in globals())")),
			responsesReply(usage(1, 1), fakemodel.Message("A new container.")))
		client := s.Client(key)
		first, err := client.Responses.New(t.Context(), ask("set v"))
		require.NoError(t, err, "expiry: first request")
		id := codeCall(t, *first, 0).ContainerID
		time.Sleep(1500 * time.Millisecond)

		p := ask("use v")
		p.Tools = []responses.ToolUnionParam{containerTool(id)}
		_, err = client.Responses.New(t.Context(), p)
		e := apiError(t, err, "expiry: naming the expired container")
		assert.Equal(t, 400, e.StatusCode, "expiry: status")
		assert.Equal(t, "container_expired", e.Code, "expiry: code")
		assert.Equal(t, "tools", e.Param, "expiry: param")
		assert.Equal(t, "invalid_request_error", e.Type, "expiry: type")
		assert.Contains(t, e.Message, id, "expiry: the message names the container")

		p = ask("use v")
		p.PreviousResponseID = openai.String(first.ID)
		second, err := client.Responses.New(t.Context(), p)
		require.NoError(t, err, "expiry: a continuation")
		assert.NotEqual(t, id, codeCall(t, *second, 0).ContainerID, "expiry: the expired container is not reused")
		reqs := m.since(mark)
		require.Len(t, reqs, 4, "expiry: the model's requests")
		assert.Equal(t, "False\n", outputOf(t, reqs[3], "call_e2"), "expiry: a fresh container")
		assert.Zero(t, m.pending(), "expiry: every scripted answer was used")
	})
}

// TestMessagesExpiredContainer: on the Messages surface a container idle past its expiry and
// its lifetime (a second each here; an idle one within its lifetime is hibernated and restored:
// TestHibernate) is refused when a request names it, with Anthropic's error shape (a 404
// not_found_error that names the container) that anthropic-sdk-go raises as its error.
func TestMessagesExpiredContainer(t *testing.T) {
	env := NewEnv(t, EnvOptions{Configure: func(c *configv1.Config) {
		c.Sandbox.SessionIdleTtl = durationpb.New(time.Second)
		c.Hibernation = &configv1.Hibernation{Dir: filepath.Join(t.TempDir(), "hibernation"), Lifetime: durationpb.New(time.Second)}
	}})
	env.Fronts(t, func(t *testing.T, s *Stack) {
		s.Model.Enqueue(messagesPath,
			fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 10, Output: 5},
				fakemodel.ToolUse("toolu_x1", "bash_code_execution", map[string]any{"command": "echo kept > kept.txt"}))),
			fakemodel.JSON(fakemodel.AnthropicMessage("claude-e2e", fakemodel.Usage{Input: 20, Output: 3}, fakemodel.Text("Saved."))))
		t.Cleanup(func() { assert.Zero(t, s.Model.Pending(), "every scripted answer was used") })
		client := s.anthropicClient()
		params := askMessagesTools("Save a file.")
		first, err := client.Messages.New(t.Context(), params)
		require.NoError(t, err, "the first request")
		require.NotEmpty(t, first.Container.ID, "the first answer names its container")
		time.Sleep(1500 * time.Millisecond)

		mark := len(s.Model.RequestsTo(messagesPath))
		params.Messages = append(params.Messages, first.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("Is it there?")))
		params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(first.Container.ID)}
		_, err = client.Messages.New(t.Context(), params)
		var apiErr *anthropic.Error
		require.True(t, errors.As(err, &apiErr), "an expired container: an API error, got %v", err)
		assert.Equal(t, http.StatusNotFound, apiErr.StatusCode, "status")
		assert.Equal(t, "error", gjson.Get(apiErr.RawJSON(), "type").String(), "Anthropic's error shape: %s", apiErr.RawJSON())
		assert.Equal(t, "not_found_error", gjson.Get(apiErr.RawJSON(), "error.type").String(), "error type: %s", apiErr.RawJSON())
		assert.Contains(t, gjson.Get(apiErr.RawJSON(), "error.message").String(), first.Container.ID, "the message names the container")
		assert.Len(t, s.Model.RequestsTo(messagesPath)[mark:], 0, "nothing went upstream")
	})
}
