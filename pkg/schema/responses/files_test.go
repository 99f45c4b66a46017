package responses_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
)

// runEvents feeds rounds to a new sink of x as the loop would, the rounds after the first as
// streamed upstream answers when live, and returns the stream.
func runEvents(t *testing.T, x schema.Exchange, rounds []schema.Round, final []byte, live bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	sink := x.Events(&buf)
	emit := func(ev schema.Event) { require.NoError(t, sink.Event(ev), "event %v", ev.Kind) }
	for i, r := range rounds {
		body := r.Body
		if live && i > 0 {
			body = streamAnswer(t, x, sink, i, r.Body)
		}
		emit(schema.Event{Kind: schema.EventRound, Round: i, Body: body})
		for _, cc := range r.Calls {
			started := cc
			started.Status, started.Outputs, started.Files = "in_progress", []schema.CodeOutput{}, nil
			emit(schema.Event{Kind: schema.EventCallStarted, Round: i, Call: &started})
			emit(schema.Event{Kind: schema.EventCallDone, Round: i, Call: &cc})
		}
	}
	emit(schema.Event{Kind: schema.EventDone, Body: final})
	return buf.Bytes()
}

func codeInterpreterClient(include bool) string {
	inc := ""
	if include {
		inc = `"include":["code_interpreter_call.outputs"],`
	}
	return `{"model":"m","stream":true,` + inc + `"input":"q","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`
}

// Outputs are shown when include asks for them, and are null otherwise: in the answer and in
// every event of the stream.
func TestIncludeOutputs(t *testing.T) {
	tests := []struct {
		name    string
		include bool
		want    string
		added   string
	}{
		{name: "include", include: true, want: `[{"type":"logs","logs":"1\n"}]`, added: `[]`},
		{name: "no include", include: false, want: `null`, added: `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := responses.Surface{}.NewExchange([]byte(codeInterpreterClient(tt.include)), schema.Options{})
			require.NoError(t, err)
			assert.Equal(t, tt.include, x.Request().IncludeOutputs, "IncludeOutputs of %s", tt.name)
			cc := schema.CodeCall{ID: "ci_a", Status: "completed", Code: "print(1)", ContainerID: "cntr_1", Outputs: []schema.CodeOutput{{Type: "logs", Logs: "1\n"}}}
			rounds := []schema.Round{{Body: answer("1", call("a", "print(1)")), Calls: []schema.CodeCall{cc}},
				{Body: answer("2", `{"type":"message","id":"msg_2","role":"assistant","status":"completed","content":[{"type":"output_text","text":"1","annotations":[]}]}`)}}
			final, err := x.Final(rounds, "")
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, gjson.GetBytes(final, "output.0.outputs").Raw, "outputs in the answer (%s)", tt.name)

			for _, live := range []bool{false, true} {
				stream := runEvents(t, x, rounds, final, live)
				var added, done, completed []string
				for _, ev := range parseSSE(t, stream) {
					switch ev.typ {
					case "response.output_item.added":
						added = append(added, gjson.Get(ev.data, "item.outputs").Raw)
					case "response.output_item.done":
						done = append(done, gjson.Get(ev.data, "item.outputs").Raw)
					case "response.completed":
						completed = append(completed, gjson.Get(ev.data, "response.output.0.outputs").Raw)
					}
				}
				require.NotEmpty(t, added, "events of %s", stream)
				assert.Equal(t, tt.added, added[0], "outputs of the call added (%s, live %v)", tt.name, live)
				assert.JSONEq(t, tt.want, done[0], "outputs of the call done (%s, live %v)", tt.name, live)
				assert.JSONEq(t, tt.want, completed[0], "outputs in response.completed (%s, live %v)", tt.name, live)

				replay, err := responses.SSE(final)
				require.NoError(t, err)
				assert.Contains(t, string(replay), `"outputs":`+tt.added+`}`, "the replayed stream's added call (%s)", tt.name)
			}
		})
	}
}

// The message after a call that wrote files cites them: container_file_citation annotations
// in the answer, and annotation.added events before output_text.done in the stream, whether
// the message's round was relayed live or written once complete.
func TestFilesCited(t *testing.T) {
	x, err := responses.Surface{}.NewExchange([]byte(codeInterpreterClient(true)), schema.Options{})
	require.NoError(t, err)
	text := `Voilà — données nettoyées: [Download the CSV](sandbox:/mnt/data/clean.csv) and the chart /mnt/data/chart.png.`
	textJSON, _ := json.Marshal(text)
	message := `{"type":"message","id":"msg_2","role":"assistant","status":"completed","content":[{"type":"output_text","text":` + string(textJSON) + `,"annotations":[],"logprobs":[]}]}`
	before := `{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"I will write /mnt/data/clean.csv","annotations":[],"logprobs":[]}]}`
	cc := schema.CodeCall{ID: "ci_a", Status: "completed", Code: "df.to_csv()", ContainerID: "cntr_1",
		Outputs: []schema.CodeOutput{{Type: "logs", Logs: "ok"}},
		Files:   []schema.CodeFile{{ID: "cfile_1", Path: "/mnt/data/clean.csv", Bytes: 12}, {ID: "cfile_2", Path: "/mnt/data/chart.png", Bytes: 99}}}
	rounds := []schema.Round{{Body: answer("1", before, call("a", "df.to_csv()")), Calls: []schema.CodeCall{cc}}, {Body: answer("2", message)}}
	final, err := x.Final(rounds, "")
	require.NoError(t, err)

	runes := []rune(text)
	linkStart := len([]rune(`Voilà — données nettoyées: `))
	link := `[Download the CSV](sandbox:/mnt/data/clean.csv)`
	pathStart := len([]rune(text)) - len(`/mnt/data/chart.png.`)
	want := `[{"type":"container_file_citation","container_id":"cntr_1","file_id":"cfile_1","filename":"clean.csv","start_index":` +
		itoa(linkStart) + `,"end_index":` + itoa(linkStart+len(link)) + `},` +
		`{"type":"container_file_citation","container_id":"cntr_1","file_id":"cfile_2","filename":"chart.png","start_index":` +
		itoa(pathStart) + `,"end_index":` + itoa(pathStart+len("/mnt/data/chart.png")) + `}]`
	anns := gjson.GetBytes(final, "output.2.content.0.annotations").Raw
	assert.JSONEq(t, want, anns, "the citations of %q", text)
	assert.Equal(t, link, string(runes[linkStart:linkStart+len(link)]), "the span of the link")
	assert.JSONEq(t, `[]`, gjson.GetBytes(final, "output.0.content.0.annotations").Raw, "a message before the call cites nothing")

	for _, live := range []bool{false, true} {
		stream := runEvents(t, x, rounds, final, live)
		var got []string
		sawDone := false
		for _, ev := range parseSSE(t, stream) {
			switch ev.typ {
			case "response.output_text.annotation.added":
				assert.False(t, sawDone, "annotation.added after output_text.done (live %v)", live)
				assert.Equal(t, "msg_2", gjson.Get(ev.data, "item_id").String(), "item of the annotation (live %v)", live)
				assert.Equal(t, int64(2), gjson.Get(ev.data, "output_index").Int(), "output index of the annotation (live %v)", live)
				assert.Equal(t, int64(len(got)), gjson.Get(ev.data, "annotation_index").Int(), "annotation_index (live %v)", live)
				got = append(got, gjson.Get(ev.data, "annotation").Raw)
			case "response.output_text.done":
				if gjson.Get(ev.data, "item_id").String() == "msg_2" {
					sawDone = true
				}
			case "response.content_part.done":
				if gjson.Get(ev.data, "item_id").String() == "msg_2" {
					assert.JSONEq(t, want, gjson.Get(ev.data, "part.annotations").Raw, "content_part.done's annotations (live %v)", live)
				}
			case "response.output_item.done":
				if gjson.Get(ev.data, "item.id").String() == "msg_2" {
					assert.JSONEq(t, want, gjson.Get(ev.data, "item.content.0.annotations").Raw, "output_item.done's annotations (live %v)", live)
				}
			case "response.completed":
				assert.JSONEq(t, want, gjson.Get(ev.data, "response.output.2.content.0.annotations").Raw, "completed's annotations (live %v)", live)
			}
		}
		assert.True(t, sawDone, "the message's text is done (live %v)", live)
		assert.JSONEq(t, want, "["+join(got)+"]", "the annotations streamed (live %v)", live)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func join(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}

// A message relayed live streams each citation as soon as its link has arrived, before the
// rest of the text; a bare path at the end of what arrived waits for what follows it.
func TestFilesCitedWhileTheTextStreams(t *testing.T) {
	x, err := responses.Surface{}.NewExchange([]byte(codeInterpreterClient(true)), schema.Options{})
	require.NoError(t, err)
	long := strings.Repeat("Some more words about the data. ", 40)
	text := "Ready: [the CSV](sandbox:/mnt/data/clean.csv) — " + long + "Chart: /mnt/data/chart.png " + long
	textJSON, _ := json.Marshal(text)
	message := `{"type":"message","id":"msg_2","role":"assistant","status":"completed","content":[{"type":"output_text","text":` + string(textJSON) + `,"annotations":[],"logprobs":[]}]}`
	cc := schema.CodeCall{ID: "ci_a", Status: "completed", Code: "x", ContainerID: "cntr_1", Outputs: []schema.CodeOutput{},
		Files: []schema.CodeFile{{ID: "cfile_1", Path: "/mnt/data/clean.csv"}, {ID: "cfile_2", Path: "/mnt/data/chart.png"}}}
	rounds := []schema.Round{{Body: answer("1", call("a", "x")), Calls: []schema.CodeCall{cc}}, {Body: answer("2", message)}}
	final, err := x.Final(rounds, "")
	require.NoError(t, err)
	stream := runEvents(t, x, rounds, final, true)

	var order []string // delta, then annotation:<file>
	for _, ev := range parseSSE(t, stream) {
		switch ev.typ {
		case "response.output_text.delta":
			if len(order) == 0 || order[len(order)-1] != "delta" {
				order = append(order, "delta")
			}
		case "response.output_text.annotation.added":
			order = append(order, "annotation:"+gjson.Get(ev.data, "annotation.file_id").String())
		}
	}
	assert.Equal(t, []string{"delta", "annotation:cfile_1", "delta", "annotation:cfile_2", "delta"}, order,
		"each citation streams once its text has arrived")
	assert.Equal(t, 2, strings.Count(string(stream), "event: response.output_text.annotation.added\n"), "two citations")
	assert.JSONEq(t, gjson.GetBytes(final, "output.1.content.0.annotations").Raw,
		gjson.Get(lastEvent(t, stream), "response.output.1.content.0.annotations").Raw, "response.completed has them")
}

func lastEvent(t *testing.T, stream []byte) string {
	t.Helper()
	evs := parseSSE(t, stream)
	require.NotEmpty(t, evs)
	return evs[len(evs)-1].data
}

// Citations follow the annotations the model's message already has (a request with web
// search), in the answer and in the stream, numbered after them.
func TestFilesCitedAfterTheModelsAnnotations(t *testing.T) {
	client := strings.Replace(codeInterpreterClient(true), `"tools":[`, `"tools":[{"type":"web_search"},`, 1)
	x, err := responses.Surface{}.NewExchange([]byte(client), schema.Options{})
	require.NoError(t, err)
	url := `{"type":"url_citation","url":"https://example.com","title":"e","start_index":0,"end_index":4}`
	message := `{"type":"message","id":"msg_2","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Docs and [csv](sandbox:/mnt/data/clean.csv)","annotations":[` + url + `],"logprobs":[]}]}`
	cc := schema.CodeCall{ID: "ci_a", Status: "completed", Code: "x", ContainerID: "cntr_1", Outputs: []schema.CodeOutput{},
		Files: []schema.CodeFile{{ID: "cfile_1", Path: "/mnt/data/clean.csv"}}}
	rounds := []schema.Round{{Body: answer("1", call("a", "x")), Calls: []schema.CodeCall{cc}}, {Body: answer("2", message)}}
	final, err := x.Final(rounds, "")
	require.NoError(t, err)
	anns := gjson.GetBytes(final, "output.1.content.0.annotations")
	require.Equal(t, int64(2), anns.Get("#").Int(), "annotations: %s", anns.Raw)
	assert.JSONEq(t, url, anns.Get("0").Raw, "the model's own first")
	assert.Equal(t, "cfile_1", anns.Get("1.file_id").String(), "then the citation")
	for _, live := range []bool{false, true} {
		var got []string
		for _, ev := range parseSSE(t, runEvents(t, x, rounds, final, live)) {
			if ev.typ == "response.output_text.annotation.added" {
				got = append(got, gjson.Get(ev.data, "annotation_index").String()+":"+gjson.Get(ev.data, "annotation.type").String())
			}
		}
		assert.Equal(t, []string{"0:url_citation", "1:container_file_citation"}, got, "annotation.added events (live %v)", live)
	}
}
