package responses

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

func TestExpandItemRefs(t *testing.T) {
	p := memory.NewPending(nil)
	rememberItems(p, "id-a", []schema.Round{{Calls: []schema.CodeCall{
		{ID: "ci_1", Code: "print(1)", ContainerID: "cntr_a", Outputs: []schema.CodeOutput{{Type: schema.CodeOutputLogs, Logs: "1\n"}}},
		{ID: "call_not_ours", Code: "x"},
	}}})
	pair := `{"type":"function_call","call_id":"ci_1","name":"code_interpreter","arguments":"{\"code\":\"print(1)\"}"},` +
		`{"type":"function_call_output","call_id":"ci_1","output":"1\n"}`
	tests := []struct {
		name, identity, give, want string
		wantContainers             []string
	}{
		{"typed reference", "id-a", `{"input":[{"type":"item_reference","id":"ci_1"}]}`, `{"input":[` + pair + `]}`, []string{"cntr_a"}},
		{"untyped reference", "id-a", `{"input":["x",{"id":"ci_1"},{"id":"msg_1"}]}`, `{"input":["x",` + pair + `,{"id":"msg_1"}]}`, []string{"cntr_a"}},
		{"another identity's id", "id-b", `{"input":[{"type":"item_reference","id":"ci_1"}]}`, `{"input":[{"type":"item_reference","id":"ci_1"}]}`, nil},
		{"an unknown id", "id-a", `{"input":[{"type":"item_reference","id":"ci_2"}]}`, `{"input":[{"type":"item_reference","id":"ci_2"}]}`, nil},
		{"not a reference", "id-a", `{"input":[{"type":"message","id":"ci_1"}]}`, `{"input":[{"type":"message","id":"ci_1"}]}`, nil},
		{"a reference with more members", "id-a", `{"input":[{"id":"ci_1","role":"user"}]}`, `{"input":[{"id":"ci_1","role":"user"}]}`, nil},
		{"input a string", "id-a", `{"input":"ci_1"}`, `{"input":"ci_1"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.give)
			top, err := openai.TopKeys.TopObject(body, "test")
			require.NoError(t, err, "scan %s", tt.give)
			got, containers, changed, err := expandItemRefs(body, top.Span("input"), "code_interpreter", p, tt.identity)
			require.NoError(t, err, "expand %s", tt.give)
			assert.Equal(t, tt.want, string(got), "expand %s", tt.give)
			assert.Equal(t, tt.want != tt.give, changed, "changed %s", tt.give)
			assert.Equal(t, tt.wantContainers, containers, "containers of %s", tt.give)
		})
	}
	assert.Nil(t, p.Get("id-a", store.Key{Kind: kindItem, ID: "call_not_ours"}), "only our ci_ items are kept")
}
