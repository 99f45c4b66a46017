package sandboxtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

func TestProvider(t *testing.T) {
	ctx := context.Background()
	p := &sandboxtest.Provider{}
	c, err := p.Create(ctx, sandbox.Spec{MemoryLimit: "4g"})
	require.NoError(t, err, "create")
	other, err := p.Create(ctx, sandbox.Spec{})
	require.NoError(t, err, "create another")

	res, err := c.Run(ctx, "x=1")
	require.NoError(t, err, "run x=1")
	assert.Equal(t, sandbox.Result{}, res, "an assignment shows nothing")
	res, err = c.Run(ctx, "x")
	require.NoError(t, err, "run x")
	assert.Equal(t, "1", res.Value, "a variable shows its value")
	res, err = other.Run(ctx, "x")
	require.NoError(t, err, "run x in another container")
	assert.Equal(t, "", res.Value, "each container has variables of its own")
	assert.Equal(t, []string{"x=1", "x", "x"}, p.Codes(), "codes of every container, in order")
	assert.Equal(t, 2, p.Container(0).Runs(), "runs of the first container")
	assert.Equal(t, []sandbox.Spec{{MemoryLimit: "4g"}, {}}, p.Specs(), "specs")

	p.Container(1).Kill()
	assert.False(t, p.Container(1).Alive(), "a killed container is not alive")
	_, err = other.Run(ctx, "x")
	assert.ErrorIs(t, err, sandbox.ErrLost, "a run of a killed container")
	assert.Equal(t, 0, p.Deleted(), "killing deletes nothing")

	require.NoError(t, c.Delete(ctx), "delete")
	require.NoError(t, c.Delete(ctx), "delete again")
	_, err = c.Run(ctx, "x")
	assert.ErrorIs(t, err, sandbox.ErrClosed, "a run of a deleted container")
	assert.Equal(t, 1, p.Deleted(), "a container deleted twice counts once")
	assert.Equal(t, 2, p.Created(), "created")

	p.FailCreate(errors.New("no bwrap"))
	_, err = p.Create(ctx, sandbox.Spec{})
	assert.EqualError(t, err, "no bwrap", "FailCreate")
	p.FailCreate(nil)
	_, err = p.Create(ctx, sandbox.Spec{})
	assert.NoError(t, err, "FailCreate(nil)")
}

func TestProviderHooks(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	p := &sandboxtest.Provider{
		Run: func(ctx context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
			if code == "fail" {
				return sandbox.Result{Stdout: "partial"}, boom
			}
			return c.Eval(code), nil
		},
		OnDelete: func(ctx context.Context, c *sandboxtest.Container) error { return boom },
	}
	c, err := p.Create(ctx, sandbox.Spec{})
	require.NoError(t, err, "create")
	res, err := c.Run(ctx, "fail")
	assert.ErrorIs(t, err, boom, "Run answers")
	assert.Equal(t, "partial", res.Stdout, "Run answers")
	_, err = c.Run(ctx, "y=2")
	require.NoError(t, err, "Run may call Eval")
	res, err = c.Run(ctx, "y")
	require.NoError(t, err, "Run may call Eval")
	assert.Equal(t, "2", res.Value, "Run may call Eval")
	assert.ErrorIs(t, c.Delete(ctx), boom, "OnDelete's error is Delete's")
	assert.True(t, p.Container(0).Deleted(), "marked deleted before OnDelete")
}
