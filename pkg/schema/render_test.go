package schema_test

import (
	"testing"

	"github.com/codeinterp/codeinterp/pkg/schema"

	"github.com/stretchr/testify/assert"
)

func TestRenderCodeOutputs(t *testing.T) {
	outs := []schema.CodeOutput{
		{Type: schema.CodeOutputLogs, Logs: "a\n"},
		{Type: schema.CodeOutputImage, URL: "data:image/png;base64,AA=="},
		{Type: "files"},
		{Type: schema.CodeOutputLogs},
		{Type: schema.CodeOutputLogs, Logs: "b"},
	}
	assert.Equal(t, "a\nb\n[1 image was shown to the user]", schema.RenderCodeOutputs(outs), "RenderCodeOutputs(%+v)", outs)
	assert.Empty(t, schema.RenderCodeOutputs(nil), "RenderCodeOutputs(nil)")
}

// TestRenderRun: the loop's rendering of a run it just made, which the replay of the run's
// outputs gives again.
func TestRenderRun(t *testing.T) {
	tests := []struct {
		name   string
		logs   string
		images int
		want   string
	}{
		{"nothing", "", 0, ""},
		{"logs only", "42\n", 0, "42\n"},
		{"one image only", "", 1, "[1 image was shown to the user]"},
		{"images only", "", 3, "[3 images were shown to the user]"},
		{"logs and an image", "mean 7", 1, "mean 7\n[1 image was shown to the user]"},
		{"logs ending in a newline and images", "mean 7\n", 2, "mean 7\n[2 images were shown to the user]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := schema.RenderRun(tt.logs, tt.images)
			assert.Equal(t, tt.want, got, "RenderRun(%q, %d)", tt.logs, tt.images)
			var outs []schema.CodeOutput
			if tt.logs != "" {
				outs = append(outs, schema.CodeOutput{Type: schema.CodeOutputLogs, Logs: tt.logs})
			}
			for range tt.images {
				outs = append(outs, schema.CodeOutput{Type: schema.CodeOutputImage, URL: "data:image/png;base64,AA=="})
			}
			assert.Equal(t, got, schema.RenderCodeOutputs(outs), "RenderCodeOutputs of the run's outputs %+v", outs)
		})
	}
}
