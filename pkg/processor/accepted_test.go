package processor

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// fakeAcceptances records the identities it hears of.
type fakeAcceptances struct {
	mu  sync.Mutex
	ids []string
}

func (f *fakeAcceptances) Accepted(identity string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = append(f.ids, identity)
}

func (f *fakeAcceptances) heard() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

// TestAcceptedModelCalls: a served request's 2xx answer tells Options.Accepted of the caller's
// identity (the one its credential hashes to); a refused one (401), an anonymous caller and a
// request passed through do not.
func TestAcceptedModelCalls(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		body   string
		status string
		want   int // identities heard of
	}{
		{"code tool, 200", "/v1/responses", toolBody, "200", 1},
		{"no code tool, 201", "/v1/chat/completions", `{"model":"m","messages":[]}`, "201", 1},
		{"refused key", "/v1/responses", toolBody, "401", 0},
		{"upstream error", "/v1/responses", plainBody, "500", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			acc := &fakeAcceptances{}
			ts := newTestServerWith(t, func(o *testOptions) { o.Accepted = acc }, nil, nil, nil)
			ex := ts.open(t)
			ex.send(postHeaders(tt.path))
			ex.send(reqBody(tt.body))
			ex.send(respHeaders(":status", tt.status, "content-type", "application/json"))
			ex.close()
			heard := acc.heard()
			assert.Len(t, heard, tt.want, "identities heard of for %s", tt.status)
			if tt.want > 0 {
				id, _ := ts.srv.signer.identity(newHeaderMap(headerMapOf("authorization", "Bearer sk-one")), "")
				assert.Equal(t, id, heard[0], "the caller's identity")
			}
		})
	}

	t.Run("anonymous", func(t *testing.T) {
		acc := &fakeAcceptances{}
		ts := newTestServerWith(t, func(o *testOptions) { o.Accepted = acc }, nil, nil, nil)
		ex := ts.open(t)
		ex.send(reqHeaders(false, ":path", "/v1/responses", ":method", "POST", "content-type", "application/json"))
		ex.send(reqBody(plainBody))
		ex.send(respHeaders(":status", "200", "content-type", "application/json"))
		ex.close()
		assert.Empty(t, acc.heard(), "no credential, nothing heard")
	})
}
