package remote

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/codeinterp/codeinterp/api/codeinterp/sandbox/v1"
	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// kinds are the sentinels an error may match, as they travel (every sentinel of package
// sandbox: a new one needs its ErrorKind here). ErrAtCapacity comes before ErrUnavailable,
// which it also matches.
var kinds = []struct {
	kind sandboxv1.ErrorKind
	err  error
}{
	{sandboxv1.ErrorKind_ERROR_KIND_AT_CAPACITY, sandbox.ErrAtCapacity},
	{sandboxv1.ErrorKind_ERROR_KIND_UNAVAILABLE, sandbox.ErrUnavailable},
	{sandboxv1.ErrorKind_ERROR_KIND_LOST, sandbox.ErrLost},
	{sandboxv1.ErrorKind_ERROR_KIND_TIMEOUT, sandbox.ErrTimeout},
	{sandboxv1.ErrorKind_ERROR_KIND_UNKNOWN_CONTAINER, sandbox.ErrUnknownContainer},
	{sandboxv1.ErrorKind_ERROR_KIND_EXPIRED_CONTAINER, sandbox.ErrExpiredContainer},
	{sandboxv1.ErrorKind_ERROR_KIND_FILE_NOT_FOUND, sandbox.ErrFileNotFound},
	{sandboxv1.ErrorKind_ERROR_KIND_FILE_TOO_LARGE, sandbox.ErrFileTooLarge},
	{sandboxv1.ErrorKind_ERROR_KIND_INVALID_PATH, sandbox.ErrInvalidPath},
	{sandboxv1.ErrorKind_ERROR_KIND_NO_FILE_ACCESS, sandbox.ErrNoFileAccess},
	{sandboxv1.ErrorKind_ERROR_KIND_CLOSED, sandbox.ErrClosed},
	{sandboxv1.ErrorKind_ERROR_KIND_INVALID_SPEC, sandbox.ErrInvalidSpec},
	{sandboxv1.ErrorKind_ERROR_KIND_ELSEWHERE, sandbox.ErrElsewhere},
	{sandboxv1.ErrorKind_ERROR_KIND_PAUSED, sandbox.ErrPaused},
	{sandboxv1.ErrorKind_ERROR_KIND_NOT_PAUSED, sandbox.ErrNotPaused},
	{sandboxv1.ErrorKind_ERROR_KIND_CANCELED, context.Canceled},
	{sandboxv1.ErrorKind_ERROR_KIND_DEADLINE_EXCEEDED, context.DeadlineExceeded},
}

// errorProto is err as it travels: its text, every sentinel it matches, its SpecError.
func errorProto(err error) *sandboxv1.Error {
	if err == nil {
		return nil
	}
	pe := &sandboxv1.Error{Message: err.Error()}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			pe.Kinds = append(pe.Kinds, k.kind)
		}
	}
	if se, ok := errors.AsType[*sandbox.SpecError](err); ok {
		pe.Spec = &sandboxv1.SpecError{Field: se.Field, Value: se.Value, Reason: se.Reason}
	}
	return pe
}

// nodeError is an error of the node's Service as the client sees it: the node's text, and
// matching (errors.Is, errors.As) what the node's error matched.
type nodeError struct {
	msg     string
	matches []error
}

func (e *nodeError) Error() string   { return e.msg }
func (e *nodeError) Unwrap() []error { return e.matches }

// errorOf is the error pe describes; nil for nil.
func errorOf(pe *sandboxv1.Error) error {
	if pe == nil {
		return nil
	}
	e := &nodeError{msg: pe.GetMessage()}
	if s := pe.GetSpec(); s != nil {
		e.matches = append(e.matches, &sandbox.SpecError{Field: s.GetField(), Value: s.GetValue(), Reason: s.GetReason()})
	}
	for _, k := range pe.GetKinds() {
		for _, kk := range kinds {
			if kk.kind == k {
				e.matches = append(e.matches, kk.err)
			}
		}
	}
	return e
}

// codeOf is the gRPC code of err, a Service's error, for logs and generic clients; the Error
// in its details is what the client reads.
func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, sandbox.ErrInvalidSpec), errors.Is(err, sandbox.ErrInvalidPath):
		return codes.InvalidArgument
	case errors.Is(err, sandbox.ErrUnknownContainer), errors.Is(err, sandbox.ErrFileNotFound):
		return codes.NotFound
	case errors.Is(err, sandbox.ErrAtCapacity), errors.Is(err, sandbox.ErrFileTooLarge):
		return codes.ResourceExhausted
	case errors.Is(err, sandbox.ErrUnavailable), errors.Is(err, sandbox.ErrClosed):
		return codes.Unavailable
	case errors.Is(err, sandbox.ErrExpiredContainer), errors.Is(err, sandbox.ErrLost),
		errors.Is(err, sandbox.ErrPaused), errors.Is(err, sandbox.ErrNotPaused):
		return codes.FailedPrecondition
	case errors.Is(err, sandbox.ErrNoFileAccess):
		return codes.Unimplemented
	default:
		return codes.Unknown
	}
}

// statusError is err, a Service's error, as a gRPC status carrying its Error.
func statusError(err error) error {
	st := status.New(codeOf(err), err.Error())
	if d, derr := st.WithDetails(errorProto(err)); derr == nil {
		st = d
	}
	return st.Err()
}

// specProto is s as it travels, its network policy's secret values included: the message
// must not be logged.
func specProto(s sandbox.Spec) *sandboxv1.Spec {
	ps := &sandboxv1.Spec{MemoryLimit: s.MemoryLimit}
	if sk := s.Skills; sk != nil {
		ps.Skills = &sandboxv1.SkillFiles{Root: sk.Root, Files: make([]*sandboxv1.SkillFile, len(sk.Files))}
		for i, f := range sk.Files {
			ps.Skills.Files[i] = &sandboxv1.SkillFile{Path: f.Path, Data: f.Data, Exec: f.Exec}
		}
	}
	if np := s.NetworkPolicy; np != nil {
		ps.NetworkPolicy = &sandboxv1.NetworkPolicy{AllowedDomains: np.AllowedDomains}
		for _, ds := range np.DomainSecrets {
			ps.NetworkPolicy.DomainSecrets = append(ps.NetworkPolicy.DomainSecrets,
				&sandboxv1.DomainSecret{Domain: ds.Domain, Name: ds.Name, Value: ds.Value})
		}
	}
	return ps
}

// specOf is the Spec ps describes: a policy present (even empty) is a policy, absent is none.
func specOf(ps *sandboxv1.Spec) sandbox.Spec {
	s := sandbox.Spec{MemoryLimit: ps.GetMemoryLimit()}
	if pk := ps.GetSkills(); pk != nil {
		sk := &sandbox.SkillFiles{Root: pk.GetRoot(), Files: make([]sandbox.SkillFile, len(pk.GetFiles()))}
		for i, f := range pk.GetFiles() {
			sk.Files[i] = sandbox.SkillFile{Path: f.GetPath(), Data: f.GetData(), Exec: f.GetExec()}
		}
		s.Skills = sk
	}
	if pn := ps.GetNetworkPolicy(); pn != nil {
		np := &sandbox.NetworkPolicy{}
		if ds := pn.GetAllowedDomains(); len(ds) > 0 {
			np.AllowedDomains = ds
		}
		for _, ds := range pn.GetDomainSecrets() {
			np.DomainSecrets = append(np.DomainSecrets,
				sandbox.DomainSecret{Domain: ds.GetDomain(), Name: ds.GetName(), Value: ds.GetValue()})
		}
		s.NetworkPolicy = np
	}
	return s
}

// unixNanos is t in Unix nanoseconds, 0 for the zero time.
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// timeOf is the time n Unix nanoseconds describe, the zero time for 0.
func timeOf(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func resultProto(r sandbox.Result) *sandboxv1.Result {
	pr := &sandboxv1.Result{
		Stdout: r.Stdout, Stderr: r.Stderr, Value: r.Value,
		Truncated: r.Truncated, FilesNote: r.FilesNote,
	}
	if r.Error != nil {
		pr.Error = &sandboxv1.RunError{Name: r.Error.Name, Value: r.Error.Value, Traceback: r.Error.Traceback}
	}
	for _, im := range r.Images {
		pr.Images = append(pr.Images, &sandboxv1.Image{Png: im.PNG})
	}
	for _, f := range r.Files {
		pr.Files = append(pr.Files, &sandboxv1.File{Id: f.ID, Path: f.Path, Size: f.Size})
	}
	for _, c := range r.Calls {
		pr.Calls = append(pr.Calls, &sandboxv1.ToolCall{Name: c.Name, Input: c.Input})
	}
	return pr
}

func resultOf(pr *sandboxv1.Result) sandbox.Result {
	r := sandbox.Result{
		Stdout: pr.GetStdout(), Stderr: pr.GetStderr(), Value: pr.GetValue(),
		Truncated: pr.GetTruncated(), FilesNote: pr.GetFilesNote(),
	}
	if e := pr.GetError(); e != nil {
		r.Error = &sandbox.Error{Name: e.GetName(), Value: e.GetValue(), Traceback: e.GetTraceback()}
	}
	if ims := pr.GetImages(); len(ims) > 0 {
		r.Images = make([]sandbox.Image, len(ims))
		for i, im := range ims {
			r.Images[i] = sandbox.Image{PNG: im.GetPng()}
		}
	}
	if fs := pr.GetFiles(); len(fs) > 0 {
		r.Files = make([]sandbox.File, len(fs))
		for i, f := range fs {
			r.Files[i] = sandbox.File{ID: f.GetId(), Path: f.GetPath(), Size: f.GetSize()}
		}
	}
	if cs := pr.GetCalls(); len(cs) > 0 {
		r.Calls = make([]sandbox.ToolCall, len(cs))
		for i, c := range cs {
			r.Calls[i] = sandbox.ToolCall{Name: c.GetName(), Input: c.GetInput()}
		}
	}
	return r
}

// toolResultsProto is results as they travel.
func toolResultsProto(results []sandbox.ToolResult) []*sandboxv1.ToolResult {
	prs := make([]*sandboxv1.ToolResult, len(results))
	for i, r := range results {
		prs[i] = &sandboxv1.ToolResult{Content: r.Content, IsError: r.IsError, Timeout: r.Timeout, CallId: r.CallID}
	}
	return prs
}

// toolResultsOf is the results prs describe.
func toolResultsOf(prs []*sandboxv1.ToolResult) []sandbox.ToolResult {
	results := make([]sandbox.ToolResult, len(prs))
	for i, r := range prs {
		results[i] = sandbox.ToolResult{Content: r.GetContent(), IsError: r.GetIsError(), Timeout: r.GetTimeout(), CallID: r.GetCallId()}
	}
	return results
}

func fileInfoProto(fi sandbox.FileInfo) *sandboxv1.FileInfo {
	return &sandboxv1.FileInfo{
		Id: fi.ID, ContainerId: fi.ContainerID, Path: fi.Path, Bytes: fi.Bytes,
		CreatedAtUnixNanos: unixNanos(fi.CreatedAt), Source: fi.Source,
	}
}

func fileInfoOf(p *sandboxv1.FileInfo) sandbox.FileInfo {
	return sandbox.FileInfo{
		ID: p.GetId(), ContainerID: p.GetContainerId(), Path: p.GetPath(), Bytes: p.GetBytes(),
		CreatedAt: timeOf(p.GetCreatedAtUnixNanos()), Source: p.GetSource(),
	}
}

func containerInfoProto(ci sandbox.ContainerInfo) *sandboxv1.ContainerInfo {
	return &sandboxv1.ContainerInfo{
		Id: ci.ID, Name: ci.Name,
		CreatedAtUnixNanos: unixNanos(ci.CreatedAt), LastActiveAtUnixNanos: unixNanos(ci.LastActiveAt),
		ExpiresAfterNanos: int64(ci.ExpiresAfter), MemoryLimit: ci.MemoryLimit, Status: ci.Status,
		AllowedDomains: ci.AllowedDomains,
	}
}

func containerInfoOf(p *sandboxv1.ContainerInfo) sandbox.ContainerInfo {
	return sandbox.ContainerInfo{
		ID: p.GetId(), Name: p.GetName(),
		CreatedAt: timeOf(p.GetCreatedAtUnixNanos()), LastActiveAt: timeOf(p.GetLastActiveAtUnixNanos()),
		ExpiresAfter: time.Duration(p.GetExpiresAfterNanos()), MemoryLimit: p.GetMemoryLimit(), Status: p.GetStatus(),
		AllowedDomains: p.GetAllowedDomains(),
	}
}

// leaseInfoProto is info as it travels (its container id travels beside it).
func leaseInfoProto(info sandbox.AcquireInfo) *sandboxv1.LeaseInfo {
	m := &sandboxv1.LeaseInfo{Node: info.Node, Origin: info.Origin, StartMode: info.StartMode, StartNanos: int64(info.StartDuration)}
	if !info.Started.IsZero() {
		m.StartedAtUnixNanos = info.Started.UnixNano()
	}
	return m
}

// leaseInfoOf is the AcquireInfo of m and the container id containerID.
func leaseInfoOf(m *sandboxv1.LeaseInfo, containerID string) sandbox.AcquireInfo {
	info := sandbox.AcquireInfo{
		Container: containerID, Node: m.GetNode(), Origin: m.GetOrigin(), StartMode: m.GetStartMode(),
		StartDuration: time.Duration(m.GetStartNanos()),
	}
	if ns := m.GetStartedAtUnixNanos(); ns != 0 {
		info.Started = time.Unix(0, ns)
	}
	return info
}
