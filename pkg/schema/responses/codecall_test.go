package responses

import (
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendCodeCall(t *testing.T) {
	tests := []struct {
		name    string
		give    schema.CodeCall
		outputs bool
		want    string
	}{
		{
			name:    "zero value",
			outputs: true,
			want:    `{"id":"","type":"code_interpreter_call","status":"","code":"","container_id":"","outputs":[]}`,
		},
		{
			name: "logs and image",
			give: schema.CodeCall{
				ID: "ci_1", Status: "completed", Code: "print('<a & b>')\n", ContainerID: "cntr_1",
				Outputs: []schema.CodeOutput{{Type: schema.CodeOutputLogs, Logs: "<a & b>\n"}, {Type: schema.CodeOutputImage, URL: "data:image/png;base64,AAA="}},
			},
			outputs: true,
			want: `{"id":"ci_1","type":"code_interpreter_call","status":"completed","code":"print('<a & b>')\n","container_id":"cntr_1",` +
				`"outputs":[{"type":"logs","logs":"<a & b>\n"},{"type":"image","url":"data:image/png;base64,AAA="}]}`,
		},
		{
			name:    "output fields of the other type are not rendered",
			give:    schema.CodeCall{ID: "ci_2", Status: "failed", Outputs: []schema.CodeOutput{{Type: schema.CodeOutputLogs, Logs: "x", URL: "u"}}},
			outputs: true,
			want: `{"id":"ci_2","type":"code_interpreter_call","status":"failed","code":"","container_id":"",` +
				`"outputs":[{"type":"logs","logs":"x"}]}`,
		},
		{
			name:    "escapes",
			give:    schema.CodeCall{Code: "\"\\\t\x01\u2028\u2029é\xff"},
			outputs: true,
			want:    `{"id":"","type":"code_interpreter_call","status":"","code":"\"\\\t\u0001\u2028\u2029é\ufffd","container_id":"","outputs":[]}`,
		},
		{
			name: "outputs not asked for",
			give: schema.CodeCall{ID: "ci_3", Status: "completed", Outputs: []schema.CodeOutput{{Type: schema.CodeOutputLogs, Logs: "x"}}},
			want: `{"id":"ci_3","type":"code_interpreter_call","status":"completed","code":"","container_id":"","outputs":null}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := appendCodeCall(nil, tt.give, tt.outputs)
			require.NoError(t, err, "appendCodeCall(%+v, %v)", tt.give, tt.outputs)
			assert.Equal(t, tt.want, string(got), "appendCodeCall(%+v, %v)", tt.give, tt.outputs)
		})
	}
	_, err := appendCodeCall(nil, schema.CodeCall{ID: "ci_4", Outputs: []schema.CodeOutput{{Type: "files"}}}, true)
	assert.ErrorContains(t, err, `unknown type "files"`, "appendCodeCall of an output of another type")
}

func TestRenderOutputs(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{"null", `null`, ""},
		{"absent", ``, ""},
		{"empty", `[]`, ""},
		{"not a list", `{"type":"logs","logs":"x"}`, ""},
		{"malformed", `[{"type":"logs","logs":"x"}`, ""},
		{"one log", `[{"type":"logs","logs":"42"}]`, "42"},
		{"log then image", `[{"type":"logs","logs":"mean 7"},{"type":"image","url":"data:image/png;base64,AA=="}]`, "mean 7\n[1 image was shown to the user]"},
		{"image then log ending in a newline", `[{"type":"image","url":"u"},{"type":"logs","logs":"a\n"},{"type":"logs","logs":"b"}]`, "a\nb\n[1 image was shown to the user]"},
		{"escaped log", `[{"type":"logs","logs":"caf\u00e9\t\"q\""}]`, "café\t\"q\""},
		{"unknown and empty entries skipped", `[{"type":"files"},{"type":"logs","logs":""},7,{"type":"logs","logs":"x"}]`, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, renderOutputs([]byte(tt.give)), "renderOutputs(%s)", tt.give)
		})
	}
}
