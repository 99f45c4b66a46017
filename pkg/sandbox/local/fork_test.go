package local

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

func TestForkSmoke(t *testing.T) {
	l := newTestLocal(t, Config{Start: StartFork, Preload: true})
	require.NotNil(t, l.tpl, "fork mode")
	c := newTestContainer(t, l, sandbox.Spec{})
	res, err := c.Run(context.Background(), "import numpy, os\nprint(1, os.getpid(), os.getuid())")
	require.NoError(t, err)
	t.Log(res.Stdout, res.Stderr)
}
