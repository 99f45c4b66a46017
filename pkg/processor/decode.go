package processor

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
)

// decodeAnswer returns a rewritten request's upstream answer as the loop reads it: raw (as it
// came, tooLarge when it was cut for being beyond max_response_bytes) decoded, or, when it
// cannot be read, the error answer to send instead (nothing was sent to the client yet).
func (st *streamState) decodeAnswer(a upstreamAnswer, raw []byte, tooLarge bool) ([]byte, *extprocv3.ProcessingResponse) {
	body, err := decodeBody(a.encoding, raw, st.route.MaxResponseBytes)
	if tooLarge {
		err = errBodyTooLarge
	}
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, errBodyTooLarge):
		st.logger().Warn("upstream answer too large", zap.String("content_encoding", a.encoding), zap.Int("bytes", len(raw)), zap.Error(err))
		msg := fmt.Sprintf("The model's answer is larger than the %d bytes codeinterp accepts.", st.route.MaxResponseBytes)
		return nil, st.gatewayError("upstream_too_large", "upstream_response_too_large", msg)
	default:
		st.logger().Warn("decode upstream answer", zap.String("content_encoding", a.encoding), zap.Error(err))
		msg := fmt.Sprintf("The upstream answered with content-encoding %q, which codeinterp cannot read.", a.encoding)
		return nil, st.gatewayError("upstream_encoding", "upstream_encoding", msg)
	}
}

// errBodyTooLarge reports an upstream answer beyond its bound (max_response_bytes).
var errBodyTooLarge = errors.New("the answer exceeds max_response_bytes")

// decodeBody undoes a content-encoding the upstream applied although the request asked for none:
// gzip (x-gzip) or deflate (zlib, or raw deflate as some servers send it). The decoded body may
// have at most limit bytes, checked while inflating, so a small compressed answer cannot
// inflate without bound; beyond it the error is errBodyTooLarge.
func decodeBody(encoding string, body []byte, limit int64) ([]byte, error) {
	var (
		r   io.Reader
		err error
	)
	switch encoding {
	case "", "identity":
		if int64(len(body)) > limit {
			return nil, fmt.Errorf("read answer: %w (%d bytes)", errBodyTooLarge, limit)
		}
		return body, nil
	case "gzip", "x-gzip":
		zr, zerr := gzip.NewReader(bytes.NewReader(body))
		r, err = zr, zerr
	case "deflate":
		if len(body) >= 2 && (uint16(body[0])<<8|uint16(body[1]))%31 == 0 && body[0]&0x0f == 8 {
			zr, zerr := zlib.NewReader(bytes.NewReader(body))
			r, err = zr, zerr
		} else {
			r = flate.NewReader(bytes.NewReader(body))
		}
	default:
		return nil, fmt.Errorf("unsupported content-encoding %q", encoding)
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", encoding, err)
	}
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", encoding, err)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("decode %s: %w (%d bytes)", encoding, errBodyTooLarge, limit)
	}
	return out, nil
}
