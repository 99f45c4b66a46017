package openai

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/tidwall/gjson"
)

func TestFinalSumJSON(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string
	}{
		{
			name: "nested leaves",
			give: []string{
				`{"input_tokens":1,"input_tokens_details":{"cached_tokens":2},"total_tokens":3}`,
				`{"input_tokens":10,"input_tokens_details":{"cached_tokens":20},"total_tokens":30}`,
			},
			want: `{"input_tokens":11,"input_tokens_details":{"cached_tokens":22},"total_tokens":33}`,
		},
		{
			name: "last order first, then earlier-only keys",
			give: []string{`{"a":1,"x":{"y":1},"b":2}`, `{"b":3,"a":4}`},
			want: `{"b":5,"a":5,"x":{"y":1}}`,
		},
		{
			name: "object beats null",
			give: []string{`{"d":{"n":1}}`, `{"d":null}`, `{"d":{"n":2,"m":1}}`},
			want: `{"d":{"n":3,"m":1}}`,
		},
		{
			name: "floats",
			give: []string{`{"cost":0.25,"n":1}`, `{"cost":0.5,"n":2.5}`},
			want: `{"cost":0.75,"n":3.5}`,
		},
		{
			name: "non-numbers from the last round",
			give: []string{`{"unit":"a","tokens":1}`, `{"unit":"b","tokens":1}`},
			want: `{"unit":"b","tokens":2}`,
		},
		{
			name: "escaped keys",
			give: []string{`{"a.b":1,"q\"":2}`, `{"a.b":1,"q\"":2}`},
			want: `{"a.b":2,"q\"":4}`,
		},
		{
			name: "int64 overflow falls back to float",
			give: []string{`{"n":9223372036854775807}`, `{"n":1}`},
			want: `{"n":9.223372036854776e+18}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var vals []gjson.Result
			for _, g := range tt.give {
				vals = append(vals, gjson.Parse(g))
			}
			got := SumJSON(nil, vals)
			assert.Equal(t, tt.want, string(got), "sum of %v", tt.give)
		})
	}
}
