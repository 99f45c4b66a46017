package e2e

import (
	"context"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/test/e2e/fakemodel"
)

// Sandbox lifetime (issue 4, item 3): an ephemeral sandbox (an anonymous caller's) is deleted
// after the reply and on every failure path; a session sandbox survives the reply. A scenario's code renames its own
// interpreter process (/proc/self/comm, visible from the host), so the test can tell whether
// that container's processes still exist.

// anonymous is a client without a credential: its containers are ephemeral (a caller with a
// key keeps its containers until they have been idle for their expiry, as natively).
func anonymous(s *Stack) openai.Client {
	return s.Client("unused", option.WithHeaderDel("authorization"))
}

// markCode renames the interpreter to marker (at most 15 bytes, the kernel's limit).
func markCode(marker string) string {
	return "open('/proc/self/comm', 'w').write('" + marker + "')\nprint('marked')"
}

// marked reports whether a process named marker runs under this test process.
func marked(marker string) bool {
	for _, p := range descendants(os.Getpid()) {
		if p.comm == marker {
			return true
		}
	}
	return false
}

// observed is a reply that first records whether marker's process runs (while the loop holds
// the sandbox: the model is answering a follow-up call), then answers with next.
func observed(marker string, seen *atomic.Bool, next reply) reply {
	return func(r *http.Request, body []byte) (int, any) {
		seen.Store(marked(marker))
		return next(r, body)
	}
}

// holdGuard bounds how long the model holds a follow-up call waiting for the client to go
// away; only a broken cancellation path makes it wait that long.
const holdGuard = 60 * time.Second

// held is a reply that signals arrived, then holds the call until its request is cancelled
// (the loop's context ended) or holdGuard passes.
func held(arrived chan<- struct{}) reply {
	return func(r *http.Request, _ []byte) (int, any) {
		close(arrived)
		t := time.NewTimer(holdGuard)
		defer t.Stop()
		select {
		case <-r.Context().Done():
		case <-t.C:
		}
		return http.StatusServiceUnavailable, errorJSON("held until the caller went away")
	}
}

// gone waits until marker's process has exited: deletion is asynchronous.
func gone(t *testing.T, marker, what string) {
	t.Helper()
	assert.Eventually(t, func() bool { return !marked(marker) }, 30*time.Second, 20*time.Millisecond,
		"%s: the sandbox's processes are gone", what)
}

func testSandboxLifetime(t *testing.T, s *Stack, m *model) {
	t.Run("an ephemeral sandbox is deleted after the reply", func(t *testing.T) {
		m.clear()
		const marker = "e2e-eph-done"
		var seen atomic.Bool
		m.script(responsesPath,
			responsesReply(usage(1, 1), runCode("call_m", markCode(marker))),
			observed(marker, &seen, responsesReply(usage(1, 1), fakemodel.Message("Done."))))
		client := anonymous(s)
		resp, err := client.Responses.New(t.Context(), ask("mark"))
		require.NoError(t, err, "ephemeral: request")
		assert.True(t, seen.Load(), "ephemeral: the marked sandbox ran during the loop")
		assert.Equal(t, "marked\n", logsOf(codeCall(t, *resp, 0)), "ephemeral: the marking ran")
		gone(t, marker, "ephemeral after the reply")

		p := ask("reuse it")
		p.Tools = []responses.ToolUnionParam{containerTool(codeCall(t, *resp, 0).ContainerID)}
		_, err = client.Responses.New(t.Context(), p)
		assert.Equal(t, http.StatusNotFound, apiError(t, err, "ephemeral: its id afterwards").StatusCode,
			"ephemeral: its id is unknown after the reply")
	})

	t.Run("an ephemeral sandbox is deleted after an upstream error", func(t *testing.T) {
		m.clear()
		const marker = "e2e-eph-500"
		var seen atomic.Bool
		m.script(responsesPath,
			responsesReply(usage(1, 1), runCode("call_m", markCode(marker))),
			observed(marker, &seen, errorReply(http.StatusInternalServerError, "the model fell over")))
		client := anonymous(s)
		_, err := client.Responses.New(t.Context(), ask("mark"))
		assert.Equal(t, http.StatusInternalServerError, apiError(t, err, "upstream error").StatusCode, "upstream error: status")
		assert.True(t, seen.Load(), "upstream error: the marked sandbox ran during the loop")
		gone(t, marker, "ephemeral after an upstream error")
	})

	t.Run("an ephemeral sandbox is deleted when the client goes away", func(t *testing.T) {
		m.clear()
		const marker = "e2e-eph-gone"
		arrived := make(chan struct{})
		m.script(responsesPath,
			responsesReply(usage(1, 1), runCode("call_m", markCode(marker))),
			held(arrived))
		client := anonymous(s)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := client.Responses.New(ctx, ask("mark, then wait"))
			done <- err
		}()
		guard := time.NewTimer(holdGuard)
		defer guard.Stop()
		select {
		case <-arrived:
		case err := <-done:
			require.Fail(t, "client gone: the request ended before the follow-up call", "error: %v", err)
		case <-guard.C:
			require.Fail(t, "client gone: the follow-up call never came")
		}
		assert.True(t, marked(marker), "client gone: the marked sandbox runs while the loop waits for the model")
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled, "client gone: the client's request was cancelled")
		gone(t, marker, "ephemeral after the client went away")
	})

	t.Run("a session sandbox survives the reply", func(t *testing.T) {
		m.clear()
		const marker = "e2e-session"
		m.script(responsesPath,
			responsesReply(usage(1, 1), runCode("call_m", markCode(marker))),
			responsesReply(usage(1, 1), fakemodel.Message("Marked.")),
			responsesReply(usage(1, 1), runCode("call_r", "print(open('/proc/self/comm').read().strip())")),
			responsesReply(usage(1, 1), fakemodel.Message("Same process.")))
		client := s.Client("sk-lifetime")
		p := ask("mark")
		withSession(&p, "lifetime-session")
		first, err := client.Responses.New(t.Context(), p)
		require.NoError(t, err, "session: first request")
		assert.True(t, marked(marker), "session: the sandbox still runs after the reply")
		second, err := client.Responses.New(t.Context(), p)
		require.NoError(t, err, "session: second request")
		assert.Equal(t, marker+"\n", logsOf(codeCall(t, *second, 0)), "session: the next request runs in the same process")
		assert.Equal(t, codeCall(t, *first, 0).ContainerID, codeCall(t, *second, 0).ContainerID, "session: same container")
	})
}
