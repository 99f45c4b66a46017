package remote

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
)

// certs writes a CA, and a server and a client certificate it signed, to dir; it returns
// their TLSFiles.
func certs(t *testing.T) (server, client TLSFiles, ca string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600), "write %s", name)
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err, "key")
		return k
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err, "CA")
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err, "parse CA")
	ca = write("ca.pem", "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) TLSFiles {
		k := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		require.NoError(t, err, "certificate %s", name)
		kder, err := x509.MarshalPKCS8PrivateKey(k)
		require.NoError(t, err, "key %s", name)
		return TLSFiles{CertFile: write(name+".pem", "CERTIFICATE", der), KeyFile: write(name+"-key.pem", "PRIVATE KEY", kder), CAFile: ca}
	}
	return leaf("server", 2, x509.ExtKeyUsageServerAuth), leaf("client", 3, x509.ExtKeyUsageClientAuth), ca
}

// TestMutualTLS: with TLS files, only a client with a certificate of the CA (and the secret)
// gets through.
func TestMutualTLS(t *testing.T) {
	serverTLS, clientTLS, ca := certs(t)
	s := serve(t, newManager(t, &sandboxtest.Provider{}), ServerOptions{TLS: serverTLS}, ClientOptions{TLS: clientTLS})
	ci, err := s.client.Create(t.Context(), sandbox.CreateRequest{Identity: "alice"})
	require.NoError(t, err, "Create over mTLS")
	assert.True(t, s.client.Known("alice", ci.ID), "Known over mTLS")

	tests := []struct {
		name string
		give TLSFiles
	}{
		{"plaintext", TLSFiles{}},
		{"no client certificate", TLSFiles{CAFile: ca}},
		{"server not trusted", TLSFiles{CertFile: clientTLS.CertFile, KeyFile: clientTLS.KeyFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Dial(s.addr, ClientOptions{Secret: testSecret, TLS: tt.give, CallTimeout: 2 * time.Second})
			require.NoError(t, err, "Dial")
			defer func() { assert.NoError(t, c.Close(), "Close") }()
			_, err = c.Create(t.Context(), sandbox.CreateRequest{Identity: "alice"})
			assert.ErrorIs(t, err, sandbox.ErrUnavailable, "Create with %s", tt.name)
		})
	}
	_, err = NewServer(newManager(t, &sandboxtest.Provider{}), ServerOptions{Secret: testSecret, TLS: TLSFiles{CAFile: ca}})
	assert.Error(t, err, "a TLS server without a certificate")
}
