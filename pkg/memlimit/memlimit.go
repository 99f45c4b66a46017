// Package memlimit names the memory sizes a container may be asked for ("1g", "4g", "16g",
// "64g"), as OpenAI's containers offer them: a request's container.memory_limit and the
// configuration's sandbox.default_memory_limit are each one of them. It imports nothing of ours,
// so that the Envoy layer, the admission checks and the configuration can share it without
// linking a sandbox backend.
package memlimit

import "slices"

// sizes are the memory limits a container may be asked for, smallest first.
var sizes = []string{"1g", "4g", "16g", "64g"}

// Sizes returns the memory limits a container may be asked for, smallest first, in a new slice.
func Sizes() []string { return slices.Clone(sizes) }

// Valid reports whether v is a memory limit a container may be asked for (exactly as written:
// "4g", not "4G" or "4096m").
func Valid(v string) bool { return slices.Contains(sizes, v) }
