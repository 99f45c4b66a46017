package memory

import "github.com/codeinterp/codeinterp/pkg/sandbox"

// NewRegistry returns an empty [sandbox.Registry] in memory: the names of one Manager's
// containers, lost when the process ends. It is the sandbox package's own in-memory registry,
// so that a Manager given this one and a Manager given none behave alike.
func NewRegistry() sandbox.Registry { return sandbox.NewMemoryRegistry() }
