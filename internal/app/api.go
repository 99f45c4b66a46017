package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
	"github.com/codeinterp/codeinterp/pkg/containers"
	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/identity"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/skills"
)

// nativeMaxExpiry is the longest expires_after OpenAI's containers take.
const nativeMaxExpiry = 20 * time.Minute

// apiServer is the HTTP server of the Containers API, over the App's sandbox manager. It
// tracks its handlers so that a Shutdown whose grace ran out still waits, boundedly, for them
// to return before the manager closes.
type apiServer struct {
	srv      *http.Server
	handlers sync.WaitGroup
}

// newAPIServer makes the Containers API of cfg over m, and Anthropic's Files API (/v1/files)
// over the same containers: callers are identified as the ext_proc server identifies them (the
// default profile's identity_header, which config validation makes every profile's, else the
// credential, hashed with secret), and file_ids are read from the default profile's upstream
// under the call's path prefix, as the ext_proc path reads them for a request under that
// prefix. Without an identity_header the credential is the identity, and (unless
// verify_api_credentials is off) it must be one the upstream takes.
func newAPIServer(cfg *configv1.Config, m sandbox.Service, secret []byte, uploads *containers.Uploads, accepted *containers.ModelCalls, skillStore skills.Store, log *zap.Logger) *apiServer {
	def := config.Profiles(cfg)[""]
	ids := identity.New(secret, identity.Config{CredentialHeaders: cfg.GetCredentialHeaders()})
	maxUpload := int64(cfg.GetMaxUploadBytes())
	store := containers.Sandboxes(m, maxUpload)
	var verify func(context.Context, string, files.Credentials) error
	if def.IdentityHeader == "" && cfg.GetVerifyApiCredentials() {
		// The credential is the identity: check it is one the upstream takes.
		verify = keyCheck(def.Upstream, cfg.GetApiKeyCheck()).Verify
		if accepted != nil {
			// api_key_check.mode "model_call": only an identity whose model call the
			// upstream took (accepted.go).
			verify = accepted.Verify
		}
	}
	ccfg := containers.Config{
		Verify:            verify,
		Identify:          func(r *http.Request) (string, error) { return ids.Of(r.Header.Values, def.IdentityHeader) },
		CredentialHeaders: ids.CredentialHeaders(),
		// Through the upstream (Envoy), so the Files API calls are routed and logged like every
		// other model API call.
		Fetcher:                      filesByPrefix(def.Upstream, cfg.GetPathPrefixes()),
		PathPrefixes:                 cfg.GetPathPrefixes(),
		MaxUploadBytes:               maxUpload,
		MaxUploadingBytesPerIdentity: int64(cfg.GetMaxUploadingBytesPerIdentity()),
		UploadIdle:                   cfg.GetApiUploadIdle().AsDuration(),
		// As natively, unless the containers live longer here by default.
		MaxExpiry: max(nativeMaxExpiry, cfg.GetSandbox().GetSessionIdleTtl().AsDuration()),
		// Anthropic's uploads, when codeinterp owns them (anthropic_files.own_uploads).
		Uploads:         uploads,
		Log:             log,
		Skills:          skillStore,
		SkillLimits:     skillLimits(cfg),
		MaxSkillUploads: int(cfg.GetSkills().GetMaxUploads()),
	}
	h := containers.New(store, store, ccfg)
	// Anthropic's Files API over the same containers, for the cfile_ ids Messages answers name.
	af := containers.NewAnthropicFiles(store, store, ccfg)
	a := &apiServer{}
	a.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a.handlers.Add(1)
			defer a.handlers.Done()
			if af.Serves(r) {
				af.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(w, r)
		}),
		// No ReadTimeout or WriteTimeout: either would cut a long upload or download. The
		// handler's idle deadline ends a request body that stalls (one byte now and then
		// restarts Envoy's idle timer, not the handler's), Envoy's route idle_timeout a download.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(log.Named("containers.http")),
	}
	return a
}

// filesByPrefix returns the Files API of each path prefix: upstream, under the prefix (a call
// on /analyst/v1/containers reads {upstream}/analyst/v1/files/{id}).
func filesByPrefix(upstream string, prefixes []string) func(prefix string) containers.Fetcher {
	base := strings.TrimSuffix(upstream, "/")
	apis := map[string]containers.Fetcher{"": &files.API{Base: base}}
	for _, p := range prefixes {
		p = strings.TrimSuffix(p, "/")
		apis[p] = &files.API{Base: base + p}
	}
	return func(prefix string) containers.Fetcher {
		if f, ok := apis[prefix]; ok {
			return f
		}
		return apis[""]
	}
}

// ServeAPI serves the Containers API on lis until Shutdown. It returns nil after Shutdown.
func (s *App) ServeAPI(lis net.Listener) error {
	if err := s.api.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// shutdown stops taking calls and lets those in progress (an upload, a download) finish until
// ctx ends; then it closes their connections and waits up to handlerWait for their handlers.
func (a *apiServer) shutdown(ctx context.Context) error {
	err := a.srv.Shutdown(ctx)
	if err == nil {
		return nil
	}
	_ = a.srv.Close()
	done := make(chan struct{})
	go func() {
		a.handlers.Wait()
		close(done)
	}()
	t := time.NewTimer(handlerWait)
	defer t.Stop()
	select {
	case <-done:
		return fmt.Errorf("shutdown containers api: %w", err)
	case <-t.C:
		// The waiter ends with the last handler, which a closed connection and a cancelled
		// request context end soon.
		return fmt.Errorf("shutdown containers api: handlers still running: %w", err)
	}
}

// keyCheck is the Verifier of the configured api_key_check at the upstream base; unset fields
// are the Verifier's defaults.
func keyCheck(base string, c *configv1.ApiKeyCheck) *containers.Verifier {
	v := &containers.Verifier{Base: base, Path: c.GetPath(), Method: c.GetMethod(), Body: c.GetBody(), Headers: c.GetHeaders()}
	for _, st := range c.GetAcceptStatuses() {
		v.AcceptStatuses = append(v.AcceptStatuses, int(st))
	}
	return v
}
