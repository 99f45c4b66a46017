package app

import (
	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// hibernationConfig maps the configuration's hibernation section onto the sandbox manager's
// settings: the zero HibernationConfig (no directory) when it is off; a directory of the
// server's own (Private) when it names none, so that several servers on one machine never
// share one.
func hibernationConfig(h *configv1.Hibernation) sandbox.HibernationConfig {
	if !h.GetEnabled() {
		return sandbox.HibernationConfig{}
	}
	return sandbox.HibernationConfig{
		Dir:                 h.GetDir(),
		Private:             h.GetDir() == "",
		Lifetime:            h.GetLifetime().AsDuration(),
		MaxBytesPerIdentity: int64(h.GetMaxBytesPerIdentity()),
		MaxPerIdentity:      int(h.GetMaxPerIdentity()),
		MaxBytes:            int64(h.GetMaxBytes()),
		MaxContainers:       int(h.GetMaxContainers()),
	}
}
