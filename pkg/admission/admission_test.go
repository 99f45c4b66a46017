package admission_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/codeinterp/codeinterp/pkg/admission"
	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/messages"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
	"github.com/codeinterp/codeinterp/pkg/store"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// containers knows ids per owner identity; "down" fails every look-up.
type containers map[string]string

func (c containers) Known(identity, id string) bool { return identity != "" && c[id] == identity }

func (c containers) Container(_ context.Context, identity, id string) (sandbox.ContainerInfo, error) {
	switch owner := c[id]; {
	case c["down"] != "":
		return sandbox.ContainerInfo{}, errors.New("manager down")
	case identity != "" && owner == identity:
		return sandbox.ContainerInfo{ID: id, Status: sandbox.StatusRunning}, nil
	case identity != "" && owner == "expired:"+identity:
		return sandbox.ContainerInfo{ID: id, Status: sandbox.StatusExpired}, nil
	}
	return sandbox.ContainerInfo{}, sandbox.ErrUnknownContainer
}

func (containers) CheckSpec(spec sandbox.Spec) error {
	if spec.MemoryLimit == "64g" {
		return &sandbox.SpecError{Field: "memory_limit", Value: spec.MemoryLimit, Reason: "above 16g"}
	}
	if p := spec.NetworkPolicy; p != nil && slices.Contains(p.AllowedDomains, "refused.example") {
		return &sandbox.SpecError{Field: "network_policy", Value: "refused.example", Reason: "network access is not enabled on this server"}
	}
	return nil
}

// caller is a Caller with a fixed identity that counts how often it was asked.
type caller struct {
	id    string
	asked int
}

func (c *caller) Identity() string         { c.asked++; return c.id }
func (c *caller) Credentials() http.Header { return http.Header{"Authorization": {"Bearer k"}} }

// filesAPI has the files in names.
type filesAPI map[string]string

func (f filesAPI) Stat(_ context.Context, _ files.Credentials, id string) (string, int64, error) {
	if id == "file-broken" {
		return "", 0, files.ErrUpstream
	}
	name, ok := f[id]
	if !ok {
		return "", 0, files.ErrNotFound
	}
	return name, int64(len(name)), nil
}

func (f filesAPI) Fetch(ctx context.Context, cred files.Credentials, id string) (string, io.ReadCloser, error) {
	name, _, err := f.Stat(ctx, cred, id)
	return name, io.NopCloser(strings.NewReader(name)), err
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func exchange(t *testing.T, body string) schema.Exchange {
	t.Helper()
	x, err := responses.Surface{}.NewExchange([]byte(body), schema.Options{})
	require.NoError(t, err, "body %s", body)
	return x
}

func newAdmission(c containers, p store.Continuations) *admission.Admission {
	return admission.New(c, p, admission.Config{
		NewFiles:          func(string) admission.Files { return filesAPI{"file-a": "a.csv", "file-big": strings.Repeat("x", 64)} },
		MaxInputFileBytes: 32,
	})
}

// Prepare refuses what may not run, each with its status, code and details; a failure that is
// not the client's carries its cause for the log.
func TestPrepareRefuses(t *testing.T) {
	const tool = `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":%s}]}`
	tests := []struct {
		name        string
		give        string
		containers  containers
		wantStatus  int
		wantCode    string
		wantDetails string
		wantCause   bool
	}{
		{name: "unknown container", give: `"cntr_x"`, wantStatus: 404, wantCode: "container_not_found", wantDetails: "codeinterp_unknown_container"},
		{name: "expired container", give: `"cntr_old"`, containers: containers{"cntr_old": "expired:id-a"}, wantStatus: 400, wantCode: "container_expired", wantDetails: "codeinterp_expired_container"},
		{name: "sandboxes down", give: `"cntr_x"`, containers: containers{"down": "y"}, wantStatus: 503, wantCode: "sandbox_unavailable", wantDetails: "codeinterp_sandbox_unavailable", wantCause: true},
		{name: "memory limit not offered", give: `{"type":"auto","memory_limit":"3g"}`, wantStatus: 400, wantCode: "invalid_value", wantDetails: "codeinterp_invalid_request"},
		{name: "memory limit above the cap", give: `{"type":"auto","memory_limit":"64g"}`, wantStatus: 400, wantCode: "invalid_value", wantDetails: "codeinterp_invalid_request"},
		{name: "missing file", give: `{"type":"auto","file_ids":["file-a","file-none"]}`, wantStatus: 400, wantCode: "file_not_found", wantDetails: "codeinterp_file_not_found", wantCause: true},
		{name: "file too large", give: `{"type":"auto","file_ids":["file-big"]}`, wantStatus: 400, wantCode: "file_too_large", wantDetails: "codeinterp_file_too_large"},
		{name: "files api down", give: `{"type":"auto","file_ids":["file-broken"]}`, wantStatus: 502, wantCode: "files_api_failed", wantDetails: "codeinterp_files_api_failed", wantCause: true},
		{name: "network policy refused by the sandboxes", give: `{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["refused.example"]}}`, wantStatus: 400, wantCode: "invalid_value", wantDetails: "codeinterp_invalid_request"},
		{name: "network policy malformed", give: `{"type":"auto","network_policy":{"type":"allowlist"}}`, wantStatus: 400, wantCode: "missing_required_parameter", wantDetails: "codeinterp_invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAdmission(tt.containers, memory.NewPending(nil))
			ad, r := a.Prepare(t.Context(), exchange(t, strings.Replace(tool, "%s", tt.give, 1)), &caller{id: "id-a"}, admission.Request{Path: "/v1/responses"})
			require.NotNil(t, r, "%s: refused", tt.give)
			assert.Nil(t, ad, "%s: nothing admitted", tt.give)
			assert.Equal(t, tt.wantStatus, r.Err.HTTPStatus(), "%s: status", tt.give)
			assert.Equal(t, tt.wantCode, r.Err.Code, "%s: code", tt.give)
			assert.Equal(t, tt.wantDetails, r.Details, "%s: details", tt.give)
			assert.Equal(t, tt.wantCause, r.Cause != nil, "%s: cause for the log", tt.give)
		})
	}
}

// A request without the code tool asks nothing of the caller unless it continues from
// something the store may hold; its files and container are not looked at.
func TestPrepareNoToolAsksNothing(t *testing.T) {
	c := &caller{id: "id-a"}
	ad, r := newAdmission(nil, memory.NewPending(nil)).Prepare(t.Context(), exchange(t, `{"model":"m","input":"x"}`), c, admission.Request{})
	require.Nil(t, r, "admitted")
	assert.False(t, ad.Continued(), "nothing to continue")
	assert.Zero(t, c.asked, "the identity is not computed")
}

// The container the loop asks for: the tool's id; a session (the header's over the request's)
// for a caller with an identity; else the last live container of the answers the request
// continues from, then of its replayed items; nothing of the kind for an anonymous caller.
func TestSandboxChoice(t *testing.T) {
	const replayed = `{"model":"m","previous_response_id":"resp_1","input":[{"type":"code_interpreter_call","id":"ci_1","status":"completed","code":"1","container_id":"%s","outputs":null}],"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`
	tests := []struct {
		name, identity, body, session string
		anonymousSessions             bool
		want                          sandbox.AcquireRequest
	}{
		{name: "the tool's id", identity: "id-a", body: `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":"cntr_mine"}]}`,
			want: sandbox.AcquireRequest{Identity: "id-a", ContainerID: "cntr_mine"}},
		{name: "the request's session", identity: "id-a", body: `{"model":"m","input":"x","metadata":{"session_id":"s1"},"tools":[{"type":"code_interpreter"}]}`,
			want: sandbox.AcquireRequest{Identity: "id-a", Session: "s1"}},
		{name: "the header's session first", identity: "id-a", session: "s2", body: `{"model":"m","input":"x","metadata":{"session_id":"s1"},"tools":[{"type":"code_interpreter"}]}`,
			want: sandbox.AcquireRequest{Identity: "id-a", Session: "s2"}},
		{name: "anonymous: no session", body: `{"model":"m","input":"x","metadata":{"session_id":"s1"},"tools":[{"type":"code_interpreter"}]}`,
			want: sandbox.AcquireRequest{}},
		{name: "anonymous sessions allowed", anonymousSessions: true, body: `{"model":"m","input":"x","metadata":{"session_id":"s1"},"tools":[{"type":"code_interpreter"}]}`,
			want: sandbox.AcquireRequest{Session: "s1"}},
		{name: "auto: a replayed item's live container, after the continued answer's", identity: "id-a", body: strings.Replace(replayed, "%s", "cntr_replayed", 1),
			want: sandbox.AcquireRequest{Identity: "id-a", ContainerID: "cntr_replayed"}},
		{name: "auto: the continued answer's last live container", identity: "id-a", body: strings.Replace(replayed, "%s", "cntr_gone", 1),
			want: sandbox.AcquireRequest{Identity: "id-a", ContainerID: "cntr_old"}},
		{name: "auto: the memory limit kept", identity: "id-a", body: `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g"}}]}`,
			want: sandbox.AcquireRequest{Identity: "id-a", Spec: sandbox.Spec{MemoryLimit: "4g"}}},
		{name: "auto: the network policy kept", identity: "id-a", body: `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["api.example.com"],"domain_secrets":[{"domain":"api.example.com","name":"T","value":"v"}]}}}]}`,
			want: sandbox.AcquireRequest{Identity: "id-a", Spec: sandbox.Spec{NetworkPolicy: &sandbox.NetworkPolicy{AllowedDomains: []string{"api.example.com"},
				DomainSecrets: []sandbox.DomainSecret{{Domain: "api.example.com", Name: "T", Value: "v"}}}}}},
		{name: "auto: a disabled network policy is none", identity: "id-a", body: `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"disabled"}}}]}`,
			want: sandbox.AcquireRequest{Identity: "id-a"}},
		{name: "shell: the container_auto network policy kept", identity: "id-a", body: `{"model":"m","input":"x","tools":[{"type":"shell","environment":{"type":"container_auto","network_policy":{"type":"allowlist","allowed_domains":["api.example.com"]}}}]}`,
			want: sandbox.AcquireRequest{Identity: "id-a", Spec: sandbox.Spec{NetworkPolicy: &sandbox.NetworkPolicy{AllowedDomains: []string{"api.example.com"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := memory.NewPending(nil)
			p.PutContainers("id-a", []string{"cntr_old", "cntr_dead"}, store.Key{Kind: "responses.response", ID: "resp_1"})
			a := newAdmission(containers{"cntr_mine": "id-a", "cntr_old": "id-a", "cntr_replayed": "id-a"}, p)
			ad, r := a.Prepare(t.Context(), exchange(t, tt.body), &caller{id: tt.identity},
				admission.Request{Session: tt.session, AllowAnonymousSessions: tt.anonymousSessions})
			require.Nil(t, r, "%s: admitted", tt.body)
			var req loop.Request
			ad.Apply(&req)
			assert.Equal(t, tt.want, req.Sandbox, "%s", tt.body)
			assert.NotNil(t, req.Exchange, "the loop gets the exchange")
		})
	}
}

// A Messages request's container is asked as Anthropic's: hibernating, with a "container_" id;
// a Responses request's keeps OpenAI's semantics (TestSandboxChoice).
func TestSandboxChoiceMessages(t *testing.T) {
	x, err := messages.Surface{}.NewExchange([]byte(`{"model":"m","max_tokens":10,"tools":[{"type":"code_execution_20250825","name":"code_execution"}],`+
		`"messages":[{"role":"user","content":"hi"}]}`), schema.Options{})
	require.NoError(t, err, "new exchange")
	ad, r := newAdmission(nil, memory.NewPending(nil)).Prepare(t.Context(), x, &caller{id: "id-a"}, admission.Request{})
	require.Nil(t, r, "admitted")
	sb := ad.Sandbox()
	assert.True(t, sb.Hibernate, "hibernates")
	assert.Equal(t, "container_", sb.IDPrefix, "a native id")
	assert.NotEmpty(t, sb.Session, "a container of its own")
}

// The files of file_ids reach the loop with their names, fetched with the caller's credentials,
// bounded as admission bounded them.
func TestApplyInputFiles(t *testing.T) {
	ad, r := newAdmission(nil, memory.NewPending(nil)).Prepare(t.Context(),
		exchange(t, `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-a"]}}]}`),
		&caller{id: "id-a"}, admission.Request{Path: "/openai/v1/responses", Upstream: "http://up/"})
	require.Nil(t, r, "admitted")
	var req loop.Request
	ad.Apply(&req)
	assert.Equal(t, []loop.InputFile{{ID: "file-a", Name: "a.csv", Bytes: 5}}, req.InputFiles, "input files")
	require.NotNil(t, req.Files, "a fetcher")
	name, _, err := req.Files.Fetch(t.Context(), "file-a")
	require.NoError(t, err, "fetch")
	assert.Equal(t, "a.csv", name, "fetched")
	assert.Equal(t, int64(32), req.MaxInputFileBytes, "bound")
}

// The refusal of a network policy names the tool's member, and says why without a secret.
func TestPrepareRefusesANetworkPolicyByName(t *testing.T) {
	const body = `{"model":"m","input":"x","tools":[{"type":"web_search"},{"type":"code_interpreter","container":{"type":"auto","network_policy":` +
		`{"type":"allowlist","allowed_domains":["refused.example"],"domain_secrets":[{"domain":"refused.example","name":"T","value":"s3cr3t-value"}]}}}]}`
	ad, r := newAdmission(nil, memory.NewPending(nil)).Prepare(t.Context(), exchange(t, body), &caller{id: "id-a"}, admission.Request{})
	require.NotNil(t, r, "refused")
	assert.Nil(t, ad, "nothing admitted")
	assert.Equal(t, "tools[1].container.network_policy", r.Err.Param, "the param")
	assert.Contains(t, r.Err.Message, "network access is not enabled on this server", "the reason")
	assert.NotContains(t, r.Err.Message, "s3cr3t-value", "no secret in the message")
}
