// Package remote is the sandbox service between the replicas of a fleet: a sandbox node
// serves its [sandbox.Service] (its Manager) with a [Server], and any replica reaches it with
// a [Client], itself a sandbox.Service that behaves as the node's Manager does: the same
// results, the same errors (every sentinel matches with errors.Is, a *sandbox.SpecError with
// errors.As), leases held while their holder lives, files streamed in bounded chunks.
//
// The service is for the replicas of one deployment only, never open to clients: every RPC
// must carry the deployment's shared secret (per-RPC credentials, compared in constant time;
// without it the call fails with codes.Unauthenticated), and the caller's identity is a field
// of each request, trusted because the peer is authenticated (the gateway computed it). Bind
// it to an address clients cannot reach, and add mTLS (the options' certificate files) where
// the network between replicas is not trusted: without TLS the secret, the code and the files
// cross it in the clear.
//
// A transport failure becomes the Service's error for it: a node that cannot be reached
// before anything ran fails the call with sandbox.ErrUnavailable; a connection lost during a
// Run fails it with sandbox.ErrLost (the code may have run, the container is out of reach); a
// download cut midway fails its reader.
//
// Each call carries the W3C trace context of its ctx (traceparent metadata), and the node's
// Service sees it in the ctx of the call served: a run forwarded to a node joins the trace of
// the loop that made it (with the options' TracerProviders, each side adds a span of the
// call).
package remote

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// MinSecretBytes is the shortest shared secret accepted.
const MinSecretBytes = 32

// Defaults of the options' zero fields.
const (
	// DefaultMaxMessageBytes bounds one gRPC message either way. A Run's Result is the
	// largest: with pkg/sandbox/local's OutputLimit L, at most some 6 L + 2 MiB (8 MiB at the
	// default L); a Result beyond the bound fails its run as a lost connection would.
	DefaultMaxMessageBytes = 64 << 20
	// DefaultChunkBytes is the size of the chunks a file is streamed in.
	DefaultChunkBytes = 64 << 10
	// MaxChunkBytes is the largest chunk a Server accepts in an upload.
	MaxChunkBytes = 1 << 20
	// DefaultMaxConcurrentStreams bounds the streams of one connection (a lease holds one
	// while it lives).
	DefaultMaxConcurrentStreams = 4096
	// DefaultKeepalive is the interval of the keepalive pings a Server sends when it has
	// heard nothing from a client; a client that does not answer one within
	// DefaultKeepaliveTimeout is taken for dead and its connection closed (its leases
	// released, its calls ended): a dead holder is seen within 8 s.
	DefaultKeepalive        = 5 * time.Second
	DefaultKeepaliveTimeout = 3 * time.Second
	// DefaultClientKeepalive is the same interval for a Client (gRPC's least for a client):
	// a dead node is seen within 13 s, or at once when its host refuses the connection.
	DefaultClientKeepalive = 10 * time.Second
	// minPingInterval is the shortest interval between a client's pings a Server accepts
	// (a client pinging more often is cut off): below every client's.
	minPingInterval = 5 * time.Second
	// DefaultCallTimeout bounds the calls that take no context (Known, CheckSpec) and a
	// lease's Release.
	DefaultCallTimeout = 10 * time.Second
)

// secretHeader is the metadata key of the shared secret.
const secretHeader = "x-codeinterp-sandbox-secret"

// TLSFiles are the PEM files of mutual TLS between replicas. All empty means plaintext.
type TLSFiles struct {
	// CertFile and KeyFile are this side's certificate and key.
	CertFile, KeyFile string
	// CAFile is the CA that signed the peer's certificate: a Server requires and verifies a
	// client certificate against it; a Client verifies the server's against it (the system
	// roots when empty).
	CAFile string
	// ServerName is the name a Client expects in the server's certificate (the address's host
	// when empty). Unused by a Server.
	ServerName string
}

func (f TLSFiles) enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" }

// config returns the TLS configuration of f, for a server or a client.
func (f TLSFiles) config(server bool) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: f.ServerName}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	} else if server {
		return nil, errors.New("a TLS server needs a certificate and key")
	}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read CA %s: no certificate in it", f.CAFile)
		}
		if server {
			c.ClientCAs = pool
			c.ClientAuth = tls.RequireAndVerifyClientCert
		} else {
			c.RootCAs = pool
		}
	}
	return c, nil
}

// checkSecret returns an error unless secret is long enough.
func checkSecret(secret []byte) error {
	if len(secret) < MinSecretBytes {
		return fmt.Errorf("the shared secret has %d bytes, fewer than %d", len(secret), MinSecretBytes)
	}
	return nil
}

// secretToken is how secret travels in the metadata.
func secretToken(secret []byte) string { return base64.RawStdEncoding.EncodeToString(secret) }

// secretMatches reports, in constant time (whatever the lengths), whether token carries secret.
func secretMatches(token string, want [sha256.Size]byte) bool {
	got, err := base64.RawStdEncoding.DecodeString(token)
	if err != nil {
		return false
	}
	h := sha256.Sum256(got)
	return subtle.ConstantTimeCompare(h[:], want[:]) == 1
}

// otelOptions are the options of the service's OpenTelemetry stats handlers: spans of tp (a
// nil tp makes none, but a noop span still carries its parent's context, so that the trace
// context propagates), the W3C trace context, and no metrics; never OTel's globals.
func otelOptions(tp trace.TracerProvider) []otelgrpc.Option {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
	}
}
