package sandbox

import (
	"context"
	"errors"
)

// Programmatic tool calling: code run in a container may call the client's own tools (await
// tool({...}) in Python). Such a call pauses the run without holding anything of the server: the
// run returns a Result whose Calls are the pending calls, the container keeps the cell where it
// paused, and a later [Resumer.Resume] with their results goes on with it, until it ends or
// pauses again. Nothing here knows an API surface.

// The bounds of one pause, which a provider checks of what the code sends.
const (
	// MaxToolCalls bounds the calls of one pause.
	MaxToolCalls = 16
	// MaxToolInputBytes bounds one call's input, as JSON text.
	MaxToolInputBytes = 256 << 10
	// MaxToolResultBytes bounds one result's content given back to the code.
	MaxToolResultBytes = 1 << 20
)

var (
	// ErrPaused means the container's cell is paused for tool calls: no other run may start
	// until it is resumed.
	ErrPaused = errors.New("the container's run is paused for tool calls")
	// ErrNotPaused means a Resume found no paused run (it ended, was abandoned, or the container
	// is another one).
	ErrNotPaused = errors.New("no run of the container is paused for tool calls")
)

// ToolCall is a call of one of the client's tools made by the code of a paused run.
type ToolCall struct {
	// Name is the tool's name as the code called it.
	Name string
	// Input is the call's input, a JSON text the code made (tenant data: check it).
	Input string
}

// ToolResult is the answer to one ToolCall, given back to the awaiting code.
type ToolResult struct {
	// Content is what the call returns to the code (a str in Python).
	Content string
	// IsError makes the call raise ToolCallError(Content) in the code instead.
	IsError bool
	// Timeout makes the call raise TimeoutError("Calling tool ['name'] timed out."), for a
	// pause abandoned past its bound.
	Timeout bool
	// CallID, for a pause whose calls were named (see [Lease.NamePause]), must be the name of
	// the call it answers.
	CallID string
}

// Resumer is the optional ability of a [Container] to pause a run for tool calls and resume it.
type Resumer interface {
	// Resume gives the paused run the results of its calls, in the order of Result.Calls, and
	// waits for it as Run does: it ends (a Result without Calls) or pauses again. ctx bounds the
	// run as Run's does. Without a paused run it fails with ErrNotPaused.
	Resume(ctx context.Context, results []ToolResult) (Result, error)
}
