package bashrun

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runShell runs the OpShell program of in with the host's python3 in a temporary directory and
// returns its result line, decoded, and what the run printed in all.
func runShell(t *testing.T, in map[string]any) (result, string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this host")
	}
	const mark = "codeinterp-result-0123456789abcdef01234567:"
	cmd := exec.Command(py, "-c", Program(OpShell, in, mark))
	cmd.Dir = t.TempDir()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "the program runs: %s", errOut.String())
	line, ok := Line(mark, out.String())
	require.True(t, ok, "the result line first: %q", out.String())
	var r result
	require.NoError(t, json.Unmarshal([]byte(line), &r), line)
	return r, out.String()
}

type result struct {
	K string `json:"k"`
	R []struct {
		Out []byte `json:"out"`
		Err []byte `json:"err"`
		RC  int    `json:"rc"`
		TO  bool   `json:"to"`
	} `json:"r"`
}

// The commands of a shell call run in order in one session; a command that outlives the time
// limit is killed with what it started, and ends the call.
func TestShellTimeout(t *testing.T) {
	start := time.Now()
	r, _ := runShell(t, map[string]any{
		"commands":  []string{"cd /tmp && X=1", "echo $PWD $X", "(sleep 30 &) ; sleep 30", "echo never"},
		"timeout":   0.5,
		"max_chars": nil,
	})
	assert.Less(t, time.Since(start), 10*time.Second, "the time limit stops the command and what it started")
	require.Equal(t, "shell", r.K)
	require.Len(t, r.R, 3, "the call ends at the command that timed out")
	assert.Equal(t, "/tmp 1\n", string(r.R[1].Out), "the session carries the directory and variables")
	assert.True(t, r.R[2].TO, "the third command timed out")
	assert.False(t, r.R[1].TO, "the second did not")
}

// Many commands that print a lot keep the result line within the head of the run's output the
// loop keeps (12 KiB of its 16 KiB default), each command cut to its share.
func TestShellBudget(t *testing.T) {
	cmds := make([]string, 64)
	for i := range cmds {
		cmds[i] = "head -c 100000 /dev/zero | tr '\\0' x"
	}
	r, out := runShell(t, map[string]any{"commands": cmds, "timeout": nil, "max_chars": nil})
	require.Len(t, r.R, 64)
	line, _, _ := strings.Cut(out, "\n")
	assert.Less(t, len(line), 12<<10, "the result line fits the head the loop keeps")
	for i, e := range r.R {
		assert.Contains(t, string(e.Out), "bytes cut", "command %d is cut", i)
	}
	r, _ = runShell(t, map[string]any{"commands": []string{"printf 0123456789; printf abc >&2"}, "timeout": nil, "max_chars": 12})
	assert.Equal(t, "0123456789", string(r.R[0].Out), "max_chars: stdout first")
	assert.Equal(t, "ab", string(r.R[0].Err), "max_chars: stderr gets the rest")
}
