// Package identity derives the identity that scopes a caller's containers: a keyed hash of the
// identity header an authentication filter in front sets, or else of the caller's credential.
// The ext_proc server and the Containers API derive it alike, with this package's one rule, so
// a caller reaches the same containers through both; the credential itself is never kept.
//
// The rule (issue 23): one credential, one identity. The identity must be derived from exactly
// the credential the upstream will use, but the request is forwarded with all its headers and
// each upstream picks its own (LiteLLM prefers x-litellm-api-key, then Authorization, then
// api-key; Azure reads api-key). So a request may carry its credential in any number of the
// credential headers, and any header any number of times, only if every value is the same
// credential (a Bearer scheme aside); a request carrying two different ones is refused
// ([ErrManyCredentials]) rather than guessed at. The identity hashes the credential alone, not
// the header that carried it: the same key is one identity whichever header it comes in. An
// identity header, when one is configured, is the identity instead; it must come once
// ([ErrRepeatedIdentityHeader]): a filter in front that appends rather than replaces would
// otherwise let the client's own value through.
package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// label derives the identity key from the server secret. Changing it changes every identity:
// every caller would lose its containers.
const label = "codeinterp identity v1"

// DefaultCredentialHeaders are the headers a credential is read from when [Config] names none
// (lower case): OpenAI's, Anthropic's, Azure's and LiteLLM's.
var DefaultCredentialHeaders = []string{"authorization", "x-api-key", "api-key", "x-litellm-api-key"}

// The errors of [Hasher.Of]: the request is the client's mistake (a 400). Their texts are
// written for the client.
var (
	// ErrManyCredentials is a request whose credential headers carry more than one credential.
	ErrManyCredentials = errors.New("the request carries more than one API key (in Authorization, x-api-key, api-key or another credential header); send exactly one")
	// ErrRepeatedIdentityHeader is a request with more than one value of the identity header.
	ErrRepeatedIdentityHeader = errors.New("the request's identity header is repeated; it must come once")
)

// Config holds a Hasher's optional settings; its zero value works.
type Config struct {
	// CredentialHeaders are the headers a credential is read from (any case). Nil or empty
	// means DefaultCredentialHeaders. Every header the upstream may read a credential from
	// belongs here: one it reads and this list misses lets a caller be many identities.
	CredentialHeaders []string
}

// Hasher derives identities with a key of its own. Its zero value is not usable; it is safe for
// concurrent use.
type Hasher struct {
	key     []byte
	headers []string
}

// New returns a Hasher keyed by secret (the server secret, which also keys other derivations:
// the Hasher's key is derived from it under its own label).
func New(secret []byte, cfg Config) Hasher {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	headers := DefaultCredentialHeaders
	if len(cfg.CredentialHeaders) > 0 {
		headers = make([]string, len(cfg.CredentialHeaders))
		for i, h := range cfg.CredentialHeaders {
			headers[i] = strings.ToLower(strings.TrimSpace(h))
		}
	}
	return Hasher{key: m.Sum(nil), headers: headers}
}

// CredentialHeaders returns the headers h reads a credential from (lower case); the caller
// must not modify it.
func (h Hasher) CredentialHeaders() []string { return h.headers }

// Of returns the identity of a request whose headers values returns (every value of a
// lower-case name, in order; none for one it does not have): the hash of identityHeader's
// value when identityHeader is set, else of the request's one credential (see the package
// comment). It returns "" — anonymous — when the request carries none, [ErrRepeatedIdentityHeader]
// or [ErrManyCredentials] when it carries more than one.
func (h Hasher) Of(values func(name string) []string, identityHeader string) (string, error) {
	var kind, value string
	if identityHeader != "" {
		vs := values(strings.ToLower(identityHeader))
		if len(vs) > 1 {
			return "", ErrRepeatedIdentityHeader
		}
		if len(vs) == 1 {
			kind, value = "header", vs[0]
		}
	} else {
		c, err := h.credential(values)
		if err != nil {
			return "", err
		}
		kind, value = "credential", c
	}
	if value == "" {
		return "", nil
	}
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(kind))
	m.Write([]byte{0})
	m.Write([]byte(value))
	return hex.EncodeToString(m.Sum(nil)[:16]), nil
}

// credential returns the one credential of the request, "" when it has none.
func (h Hasher) credential(values func(name string) []string) (string, error) {
	var found string
	for _, name := range h.headers {
		for _, v := range values(name) {
			c := Credential(name, v)
			switch {
			case c == "":
			case found == "":
				found = c
			case c != found:
				return "", ErrManyCredentials
			}
		}
	}
	return found, nil
}

// Credential returns the credential a value of header name (lower case) carries, as the
// identity compares and hashes it: Authorization's Bearer scheme (any case) removed, spaces
// around it trimmed. Another scheme (Basic) stays part of the credential.
func Credential(name, value string) string {
	value = strings.TrimSpace(value)
	if name == "authorization" && len(value) > 7 && strings.EqualFold(value[:7], "bearer ") {
		value = strings.TrimSpace(value[7:])
	}
	return value
}
