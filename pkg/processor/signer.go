package processor

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/pkg/identity"
)

// followUpHeader marks the loop's own follow-up calls. Its value is
// "v1.<unix expiry>.<hex HMAC-SHA256>" over the path, the caller's identity and the expiry, so it
// is valid only for that request path and credential until it expires; clients cannot forge it, and
// it is removed before the request leaves Envoy.
const followUpHeader = reservedPrefix + "followup"

// signer derives the follow-up signatures and identity hashes from the server secret.
type signer struct {
	followUpKey []byte
	identities  identity.Hasher
}

// newSigner returns the signer of secret; creds are the credential headers (nil: the
// identity package's defaults).
func newSigner(secret []byte, creds []string) signer {
	return signer{
		followUpKey: derive(secret, "codeinterp follow-up v1"),
		identities:  identity.New(secret, identity.Config{CredentialHeaders: creds}),
	}
}

func derive(secret []byte, label string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// identity returns the keyed hash that scopes the caller's sandboxes (see [identity.Hasher.Of]):
// of the identity header when one is configured (set by an authentication filter in front), else
// of the one credential. It returns "" when the request carries neither, and an error the client
// reads when it carries two credentials or the identity header twice.
func (s signer) identity(h headerMap, identityHeader string) (string, error) {
	return s.identities.Of(func(name string) []string {
		var vs []string
		for _, hv := range h {
			if hv.GetKey() == name {
				vs = append(vs, value(hv))
			}
		}
		return vs
	}, identityHeader)
}

func (s signer) mac(path, identity string, expiry int64) []byte {
	m := hmac.New(sha256.New, s.followUpKey)
	m.Write([]byte(strconv.FormatInt(expiry, 10)))
	m.Write([]byte{0})
	m.Write([]byte(path))
	m.Write([]byte{0})
	m.Write([]byte(identity))
	return m.Sum(nil)
}

// signFollowUp returns the follow-up header value for path and identity, valid until expiry.
func (s signer) signFollowUp(path, identity string, expiry time.Time) string {
	e := expiry.Unix()
	return "v1." + strconv.FormatInt(e, 10) + "." + hex.EncodeToString(s.mac(path, identity, e))
}

// verifyFollowUp reports whether v is a valid, unexpired follow-up signature for path and identity.
func (s signer) verifyFollowUp(v, path, identity string, now time.Time) bool {
	if v == "" {
		return false
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return false
	}
	e, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || now.Unix() > e {
		return false
	}
	got, err := hex.DecodeString(parts[2])
	if err != nil {
		return false
	}
	return hmac.Equal(got, s.mac(path, identity, e))
}
