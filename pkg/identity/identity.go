// Package identity derives the identity that scopes a caller's containers: a keyed hash of the
// identity header an authentication filter in front sets, or else of the caller's credential.
// The ext_proc server and the Containers API derive it alike, so a caller reaches the same
// containers through both; the credential itself is never kept.
package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// label derives the identity key from the server secret. Changing it changes every identity:
// every caller would lose its containers.
const label = "codeinterp identity v1"

// credentialHeaders are the headers a credential is read from, in this order (lower case).
var credentialHeaders = []string{"authorization", "x-api-key", "api-key"}

// Hasher derives identities with a key of its own. Its zero value is not usable; it is safe for
// concurrent use.
type Hasher struct {
	key []byte
}

// New returns a Hasher keyed by secret (the server secret, which also keys other derivations:
// the Hasher's key is derived from it under its own label).
func New(secret []byte) Hasher {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	return Hasher{key: m.Sum(nil)}
}

// Of returns the identity of a request whose headers get returns (by lower-case name; "" for
// one it does not have): the hash of identityHeader's value when identityHeader is set, else of
// the first of Authorization, X-Api-Key and Api-Key present. It returns "" — anonymous — when
// the request carries none of them.
func (h Hasher) Of(get func(name string) string, identityHeader string) string {
	var kind, value string
	if identityHeader != "" {
		kind, value = "header", get(identityHeader)
	} else {
		for _, k := range credentialHeaders {
			if v := get(k); v != "" {
				kind, value = k, v
				break
			}
		}
	}
	if value == "" {
		return ""
	}
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(kind))
	m.Write([]byte{0})
	m.Write([]byte(value))
	return hex.EncodeToString(m.Sum(nil)[:16])
}
