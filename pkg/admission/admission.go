// Package admission decides, between the processor and the loop, whether and where a
// request's code may run: the container it names, its memory limit and network policy, the
// Files API files it copies in, the container it reuses (its own id, a session, or the last live container of the
// answers it continues from), and the continuation of an earlier answer (the code calls that
// answer left out, kept in a [store.Continuations]). It knows nothing of Envoy: the processor
// hands it the request's exchange and caller, and turns a refusal into the client's answer.
package admission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/pkg/files"
	"github.com/codeinterp/codeinterp/pkg/loop"
	"github.com/codeinterp/codeinterp/pkg/memlimit"
	"github.com/codeinterp/codeinterp/pkg/netpolicy"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/skills"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// Containers tells whether a container id was issued to an identity, and whether a container
// of a spec may be created. *sandbox.Manager implements it.
type Containers interface {
	// Known reports whether containerID was issued to identity and is alive.
	Known(identity, containerID string) bool
	// Container returns the container id of identity: sandbox.ErrUnknownContainer when it
	// was not issued to identity; an expired one is shown with sandbox.StatusExpired (or
	// fails with sandbox.ErrExpiredContainer).
	Container(ctx context.Context, identity, id string) (sandbox.ContainerInfo, error)
	// CheckSpec returns an error matching sandbox.ErrInvalidSpec for a spec no container may
	// have (a memory limit above the operator's cap).
	CheckSpec(spec sandbox.Spec) error
}

// Files reads the caller's files of an upstream's Files API. *files.API implements it.
type Files interface {
	// Stat returns the file's name and size; files.ErrNotFound when the caller has no such
	// file, files.ErrUpstream when the Files API failed.
	Stat(ctx context.Context, cred files.Credentials, fileID string) (name string, bytes int64, err error)
	// Fetch returns the file's name and its content, which the caller closes.
	Fetch(ctx context.Context, cred files.Credentials, fileID string) (name string, content io.ReadCloser, err error)
}

// Config holds an Admission's optional settings; the zero value works.
type Config struct {
	// FilesClient sends the calls to the upstream's Files API that read the files a request's
	// code_interpreter tool names (container.file_ids). If nil, the files package's own
	// client, which follows no redirect.
	FilesClient files.Doer
	// NewFiles, if set, returns the Files API at a base URL instead of a *files.API (a test
	// seam).
	NewFiles func(base string) Files
	// MaxInputFileBytes bounds each file of a tool's container.file_ids (max_upload_bytes, as
	// for the Containers API's uploads); zero means no bound here (the loop still bounds the
	// copy).
	MaxInputFileBytes int64
	// Stored keeps the assembled answers of the requests the loop answered, which GET
	// /v1/responses/{id} then reads (see stored.go); nil keeps none.
	Stored store.Pending
	// ResolveSkills, where skills are served, turns the skills raw of the shell tool's
	// container_auto environment (named param in errors) of identity into the files mounted in
	// its container and the skills the model is told of; a *schema.RequestError is the client's.
	// Nil when the Skills API is off: then a request with skills is a native 400.
	ResolveSkills func(ctx context.Context, identity string, raw []byte, param string) (*sandbox.SkillFiles, []MountedSkill, error)
	// ContainerSkills, where skills are served, returns the skills identity's container id
	// was created with (none for a container created without), which a request naming the
	// container tells the model of (see announceContainerSkills). Nil: none are told.
	ContainerSkills func(ctx context.Context, identity, id string) ([]MountedSkill, error)
	// AttachSkills, where skills are served, records that identity's container id was created
	// with the skills ms (the shell tool's container_auto skills), which ContainerSkills then
	// returns: a later request naming the container tells the model of them. The container
	// works without the record, so a failure is the function's to log. Nil: none is recorded.
	AttachSkills func(ctx context.Context, identity, id string, ms []MountedSkill)
	// SkillStore, where skills are served, is the Skills API's store, in which the skills a
	// request names by id for its container are found (see SkillsRequester). Nil: a request
	// naming any is a 400.
	SkillStore skills.Store
}

// MountedSkill is a skill mounted in a request's container, as the model is told of it.
type MountedSkill struct {
	Name, Description string
	// Path is its SKILL.md's in the container.
	Path string
}

// Admission admits requests. It is safe for concurrent use.
type Admission struct {
	containers    Containers
	continuations store.Continuations
	files         func(base string) Files
	maxInputFile  int64
	stored        store.Pending
	resolveSkills func(ctx context.Context, identity string, raw []byte, param string) (*sandbox.SkillFiles, []MountedSkill, error)
	skillsOf      func(ctx context.Context, identity, id string) ([]MountedSkill, error)
	attachSkills  func(ctx context.Context, identity, id string, ms []MountedSkill)
	skillStore    skills.Store
}

// New returns an Admission that checks containers with c and keeps continuations in p.
func New(c Containers, p store.Continuations, cfg Config) *Admission {
	newFiles := cfg.NewFiles
	if newFiles == nil {
		client := cfg.FilesClient
		newFiles = func(base string) Files {
			if client == nil {
				return &files.API{Base: base}
			}
			return &files.API{Base: base, Client: client}
		}
	}
	return &Admission{containers: c, continuations: p, files: newFiles, maxInputFile: cfg.MaxInputFileBytes, stored: cfg.Stored,
		resolveSkills: cfg.ResolveSkills, skillsOf: cfg.ContainerSkills, attachSkills: cfg.AttachSkills, skillStore: cfg.SkillStore}
}

// Caller is who sent a request, as the processor knows it. Its methods are called only when
// needed, Identity at most once per Admitted.
type Caller interface {
	// Identity returns the caller's identity ("" for an anonymous caller).
	Identity() string
	// Credentials returns the caller's credential headers, which the Files API is called
	// with.
	Credentials() http.Header
}

// Request is what admission needs to know of a request besides its exchange and caller.
type Request struct {
	// Path is the request's path, with its query: the Files API is found under its prefix.
	Path string
	// Upstream is the base URL of the route's model API.
	Upstream string
	// Session is the value of the route's session header, "" when it has none.
	Session string
	// AllowAnonymousSessions reports whether a caller without an identity may name a
	// session (it would be shared by every anonymous caller).
	AllowAnonymousSessions bool
}

// Refusal is why a request may not go on: the error the client reads, in its surface's
// shape, with the Envoy response details and, when the client's request was not the cause,
// what the log gets.
type Refusal struct {
	// Err is the error answer. A status of 500 or more is a failure that is not the client's.
	Err *schema.RequestError
	// Details is the answer's response code details ("codeinterp_file_not_found").
	Details string
	// Cause is the underlying error, for the log; nil when there is none.
	Cause error
}

// Admitted is a request that admission let through, from its rewrite to its answer. It is
// used by one goroutine at a time.
type Admitted struct {
	a        *Admission
	x        schema.Exchange
	caller   Caller
	req      Request
	identity string
	// identified reports that identity was asked of the caller.
	identified bool
	// continued reports whether the request's body was changed by its continuation.
	continued bool
	// inputFiles are the files of the tool's container.file_ids, as the Files API named them.
	inputFiles []loop.InputFile
	// network is the tool's container network_policy of type allowlist; nil for none.
	network *sandbox.NetworkPolicy
	// skills are the files of the shell tool's container_auto skills; nil for none. mounted
	// is what the model is told of them, which the containers created with them record (see
	// attachCreated).
	skills  *sandbox.SkillFiles
	mounted []MountedSkill
	// named reports whether the loop was told an existing container's id or a session (see
	// Apply), which may name a container created without the skills.
	named bool
}

// Bounds of the look-up of a request's file_ids, done before anything goes upstream: it holds
// the request body's answer to Envoy, whose message_timeout (30s in envoy/envoy.yaml) must not
// pass meanwhile.
const (
	filesStatTimeout     = 10 * time.Second
	filesStatConcurrency = 8
)

// Prepare admits the request of exchange x, whose body has just been rewritten: it puts back
// the code calls an earlier answer left out (see [schema.Continuation]) and, when the
// request has the code tool, checks the container it names, its memory limit and its
// file_ids. A refusal is the answer to send instead of forwarding the request.
func (a *Admission) Prepare(ctx context.Context, x schema.Exchange, c Caller, r Request) (*Admitted, *Refusal) {
	ad := &Admitted{a: a, x: x, caller: c, req: r}
	if cx, ok := x.(schema.Continuation); ok {
		continued, err := cx.Continue(a.continuations, ad.callerIdentity)
		if err != nil {
			// The request continues from an answer whose code calls it must carry, and they
			// could not be put back: sent without them, the upstream would refuse it or the
			// model would not see its own code.
			return nil, serverError("continuation_failed", "codeinterp could not put back the code calls of the answer this request continues from.", err)
		}
		ad.continued = continued
	}
	rq := x.Request()
	if !rq.Found {
		return ad, nil
	}
	identity := ad.callerIdentity()
	if rq.ContainerID != "" {
		if r := a.checkContainer(ctx, identity, rq.ContainerID); r != nil {
			return nil, r
		}
		if r := ad.announceContainerSkills(ctx, rq); r != nil {
			return nil, r
		}
	}
	if rq.MemoryLimit != "" {
		if re := a.checkMemoryLimit(rq.MemoryLimit); re != nil {
			return nil, &Refusal{Err: re, Details: "codeinterp_invalid_request"}
		}
	}
	if rq.NetworkPolicy != nil {
		p, re := a.checkNetwork(rq.NetworkPolicy, rq.NetworkPolicyParam)
		if re != nil {
			return nil, &Refusal{Err: re, Details: "codeinterp_invalid_request"}
		}
		ad.network = p
	}
	if len(rq.Skills) > 0 {
		if r := ad.mountSkills(ctx, rq); r != nil {
			return nil, r
		}
	}
	if r := ad.mountRequestedSkills(ctx); r != nil {
		return nil, r
	}
	if len(rq.FileIDs) > 0 {
		if r := ad.statFiles(ctx, rq.FileIDs); r != nil {
			return nil, r
		}
	}
	return ad, nil
}

// mountSkills resolves the skills of the shell tool's container_auto environment into the
// files its container mounts, and tells the model of them.
func (ad *Admitted) mountSkills(ctx context.Context, rq *schema.Request) *Refusal {
	if ad.a.resolveSkills == nil {
		return &Refusal{Err: &schema.RequestError{Message: "Skills are not served by this gateway (the Skills API is off).",
			Param: rq.SkillsParam, Code: "unsupported_parameter"}, Details: "codeinterp_invalid_request"}
	}
	files, ms, err := ad.a.resolveSkills(ctx, ad.callerIdentity(), rq.Skills, rq.SkillsParam)
	if re, ok := errors.AsType[*schema.RequestError](err); ok {
		return &Refusal{Err: re, Details: "codeinterp_invalid_request"}
	}
	if err != nil {
		return &Refusal{Err: &schema.RequestError{Status: http.StatusServiceUnavailable, Code: "skills_unavailable",
			Message: "codeinterp could not read the request's skills; try again."}, Details: "codeinterp_skills_unavailable", Cause: err}
	}
	ad.skills, ad.mounted = files, ms
	if sa, ok := ad.x.(schema.SkillsAnnouncer); ok && len(ms) > 0 {
		sa.AnnounceSkills(SkillsText(ms))
	}
	return nil
}

// SkillsText is what the model is told of the skills ms mounted in its container: each one's
// name, description and the path of its SKILL.md, which it reads before using the skill.
func SkillsText(ms []MountedSkill) string {
	var b strings.Builder
	b.WriteString("\n\nSkills are installed in the container. Each is a folder of instructions, scripts and files; " +
		"before using a skill, read its SKILL.md at the path given, and follow it.\n")
	for _, m := range ms {
		fmt.Fprintf(&b, "- %s: %s (path: %s)\n", m.Name, m.Description, m.Path)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// callerIdentity returns the caller's identity, asked of the Caller once.
func (ad *Admitted) callerIdentity() string {
	if !ad.identified {
		ad.identity, ad.identified = ad.caller.Identity(), true
	}
	return ad.identity
}

// Continued reports whether the continuation changed the request's body
// (Exchange.Request().Body).
func (ad *Admitted) Continued() bool { return ad.continued }

// Accepted is called when the upstream has taken the request (a 2xx answer): what the store
// held only until then is dropped.
func (ad *Admitted) Accepted() {
	if cx, ok := ad.x.(schema.Continuation); ok {
		cx.Accepted(ad.a.continuations, ad.callerIdentity())
	}
}

// Answered is called with the loop's answer: a 200 keeps what a request continuing from it
// needs (the calls it left out, the name it has, the containers it ran in), and the answer
// itself for its retrieval by id.
func (ad *Admitted) Answered(res loop.Response) {
	if res.Status != http.StatusOK {
		return
	}
	ad.attachCreated()
	ad.keep(res.Body)
	if cx, ok := ad.x.(schema.Continuation); ok {
		cx.Remember(ad.a.continuations, ad.callerIdentity(), res.Body, res.Pending)
	}
}

// Sandbox returns where the request's code runs, as the loop asks for it: the tool's
// container id; else, for a caller with an identity (or where anonymous sessions are
// allowed), the session header's or the request's session, or, as OpenAI's auto containers
// do, the last live container of an earlier call in the request's context: the answers it
// continues from, then its replayed items (one that expired is not reused: the request gets a
// new container). It is asked when the loop starts, so that a container that expired since the
// request is not named.
func (ad *Admitted) Sandbox() sandbox.AcquireRequest {
	rq := ad.x.Request()
	identity := ad.callerIdentity()
	sb := sandbox.AcquireRequest{Identity: identity, Spec: sandbox.Spec{MemoryLimit: rq.MemoryLimit, NetworkPolicy: ad.network, Skills: ad.skills},
		Hibernate: rq.Hibernate, IDPrefix: rq.IDPrefix}
	switch {
	case rq.ContainerID != "":
		sb.ContainerID = rq.ContainerID
	case identity == "" && !ad.req.AllowAnonymousSessions:
		// Without an identity a session name would be shared by every anonymous caller.
	default:
		sb.Session = rq.SessionID
		if ad.req.Session != "" {
			sb.Session = ad.req.Session
		}
		if sb.Session == "" {
			named := append(slices.Clone(rq.ContextContainerIDs), rq.ReplayedContainerIDs...)
			for i := len(named) - 1; i >= 0; i-- {
				if id := named[i]; ad.a.containers.Known(identity, id) {
					sb.ContainerID = id
					break
				}
			}
		}
	}
	return sb
}

// Apply sets the loop request's part that admission decided: the exchange, where its code
// runs (see Sandbox), and the files copied into the container first, with how they are
// fetched. It is called when the loop starts.
func (ad *Admitted) Apply(r *loop.Request) {
	r.Exchange = ad.x
	r.Sandbox = ad.Sandbox()
	ad.named = r.Sandbox.ContainerID != "" || r.Sandbox.Session != ""
	r.MaxInputFileBytes = ad.a.maxInputFile
	if len(ad.inputFiles) > 0 {
		r.InputFiles = ad.inputFiles
		r.Files = boundFiles{api: ad.filesAPI(), cred: files.CredentialsOf(ad.caller.Credentials())}
	}
}

// Identity returns the caller's identity.
func (ad *Admitted) Identity() string { return ad.callerIdentity() }

// checkContainer refuses a request whose tool names container id when it may not run there: a
// 404 when the id was not issued to the caller, a 400 when it expired (as natively: an expired
// container cannot be used again), a 503 when the sandboxes cannot tell.
func (a *Admission) checkContainer(ctx context.Context, identity, id string) *Refusal {
	info, err := a.containers.Container(ctx, identity, id)
	switch {
	case errors.Is(err, sandbox.ErrExpiredContainer) || err == nil && info.Status == sandbox.StatusExpired:
		return &Refusal{Err: &schema.RequestError{
			Message: fmt.Sprintf("Container '%s' is expired: a container expires once it has not been used for its expiry, and cannot be used again. Use another container.", id),
			Param:   "tools",
			Code:    "container_expired",
		}, Details: "codeinterp_expired_container"}
	case errors.Is(err, sandbox.ErrUnknownContainer):
		return &Refusal{Err: &schema.RequestError{
			Status:  http.StatusNotFound,
			Message: fmt.Sprintf("Container '%s' not found.", id),
			Param:   "tools",
			Code:    "container_not_found",
		}, Details: "codeinterp_unknown_container"}
	case err != nil:
		return &Refusal{Err: &schema.RequestError{Status: http.StatusServiceUnavailable,
			Message: "codeinterp could not look up the container; try again.", Code: "sandbox_unavailable"},
			Details: "codeinterp_sandbox_unavailable", Cause: fmt.Errorf("look up container: %w", err)}
	}
	return nil
}

// checkMemoryLimit returns the client error for a container memory_limit that may not be
// created: not one of the API's sizes, or above the operator's cap.
func (a *Admission) checkMemoryLimit(limit string) *schema.RequestError {
	if !memlimit.Valid(limit) {
		return &schema.RequestError{
			Message: fmt.Sprintf("Invalid memory_limit '%s': expected one of %s.", limit, strings.Join(memlimit.Sizes(), ", ")),
			Param:   "tools",
			Code:    "invalid_value",
		}
	}
	var se *sandbox.SpecError
	if err := a.containers.CheckSpec(sandbox.Spec{MemoryLimit: limit}); errors.As(err, &se) {
		return &schema.RequestError{
			Message: fmt.Sprintf("Invalid memory_limit '%s': %s.", limit, se.Reason),
			Param:   "tools",
			Code:    "invalid_value",
		}
	}
	return nil
}

// checkNetwork returns the policy of the tool's container network_policy raw (named param):
// nil for type disabled; a client error for one that is malformed, or that may not be
// created here (network access off, a domain outside the operator's allowlist, an invalid
// rule or secret). No error holds a secret's value.
func (a *Admission) checkNetwork(raw []byte, param string) (*sandbox.NetworkPolicy, *schema.RequestError) {
	p, err := netpolicy.Parse(raw, param)
	var re *schema.RequestError
	if errors.As(err, &re) {
		return nil, re
	}
	if p == nil {
		return nil, nil
	}
	var se *sandbox.SpecError
	if err := a.containers.CheckSpec(sandbox.Spec{NetworkPolicy: p}); errors.As(err, &se) {
		return nil, &schema.RequestError{
			Message: fmt.Sprintf("Invalid '%s': %s.", param, se.Reason),
			Param:   param,
			Code:    "invalid_value",
		}
	}
	return p, nil
}

// filesAPI returns the Files API of the route: the upstream, under the request path's prefix
// before "/v1/" (the prefix the route serves the API under, as the follow-ups keep it): a
// request to {upstream}/openai/v1/responses reads {upstream}/openai/v1/files/{id}.
func (ad *Admitted) filesAPI() Files {
	base := strings.TrimSuffix(ad.req.Upstream, "/")
	p := ad.req.Path
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if i := strings.Index(p, "/v1/"); i >= 0 {
		base += p[:i]
	}
	return ad.a.files(base)
}

// statFiles checks, before the request goes upstream, that every file of the tool's file_ids
// is one the caller may read, and keeps their names for the loop, which copies them into the
// container on its first run. It refuses the request when one is not: a 400 naming the first
// missing file or the first larger than max_upload_bytes, or a 502 when the Files API failed.
func (ad *Admitted) statFiles(ctx context.Context, ids []string) *Refusal {
	ctx, cancel := context.WithTimeout(ctx, filesStatTimeout)
	defer cancel()
	api, cred := ad.filesAPI(), files.CredentialsOf(ad.caller.Credentials())
	errs := make([]error, len(ids))
	out := make([]loop.InputFile, len(ids))
	sem := make(chan struct{}, filesStatConcurrency) // bounds the concurrent look-ups
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			name, size, err := api.Stat(ctx, cred, id)
			errs[i] = err
			out[i] = loop.InputFile{ID: id, Name: name, Bytes: size}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if errors.Is(err, files.ErrNotFound) {
			return &Refusal{Err: &schema.RequestError{
				Message: fmt.Sprintf("File '%s' not found: container.file_ids names a file the Files API does not have.", ids[i]),
				Param:   "tools",
				Code:    "file_not_found",
			}, Details: "codeinterp_file_not_found", Cause: err}
		}
	}
	if limit := ad.a.maxInputFile; limit > 0 {
		for i, f := range out {
			if errs[i] == nil && f.Bytes > limit {
				return &Refusal{Err: &schema.RequestError{
					Message: fmt.Sprintf("File '%s' is too large: container.file_ids names a file of %d bytes, and a container file may have at most %d bytes.", ids[i], f.Bytes, limit),
					Param:   "tools",
					Code:    "file_too_large",
				}, Details: "codeinterp_file_too_large"}
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			return &Refusal{Err: &schema.RequestError{Status: http.StatusBadGateway,
				Message: "codeinterp could not read the files of container.file_ids from the Files API.", Code: "files_api_failed"},
				Details: "codeinterp_files_api_failed", Cause: fmt.Errorf("look up container.file_ids: %w", err)}
		}
	}
	ad.inputFiles = out
	return nil
}

// serverError is the refusal of a failure that is not the client's: a 500 with a fixed text,
// the details going to the log.
func serverError(code, message string, cause error) *Refusal {
	return &Refusal{Err: &schema.RequestError{Status: http.StatusInternalServerError, Message: message, Code: code},
		Details: "codeinterp_" + code, Cause: cause}
}

// boundFiles is a Files API with the caller's credentials, as the loop fetches files.
type boundFiles struct {
	api  Files
	cred files.Credentials
}

// Fetch implements [loop.Fetcher].
func (b boundFiles) Fetch(ctx context.Context, fileID string) (string, io.ReadCloser, error) {
	return b.api.Fetch(ctx, b.cred, fileID)
}
