package app

import (
	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/containers"
	"github.com/codeinterp/codeinterp/pkg/processor"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// modelCalls is the record of the identities the upstream took a model call of, in s, when
// the Containers API accepts only those (api_key_check.mode "model_call", the credential
// being the identity and verify_api_credentials on); else nil.
func modelCalls(cfg *configv1.Config, s store.Pending) *containers.ModelCalls {
	c := cfg.GetApiKeyCheck()
	if c.GetMode() != config.KeyCheckModelCall || !cfg.GetVerifyApiCredentials() || config.Profiles(cfg)[""].IdentityHeader != "" {
		return nil
	}
	return &containers.ModelCalls{Store: s, TTL: c.GetAcceptedTtl().AsDuration()}
}

// acceptances is m as the processor's Acceptances: nil (none) when m is.
func acceptances(m *containers.ModelCalls) processor.Acceptances {
	if m == nil {
		return nil
	}
	return m
}

var _ processor.Acceptances = (*containers.ModelCalls)(nil)
