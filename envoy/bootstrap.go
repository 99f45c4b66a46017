// Package envoy loads and validates the Envoy bootstrap the project ships (envoy.yaml in this
// directory) with go-control-plane's generated types, the way Envoy itself reads it: YAML is
// turned into JSON and decoded with the protobuf JSON mapping into
// envoy.config.bootstrap.v3.Bootstrap, and every typed_config must name a registered type.
//
// The Go Envoy harness in test/e2e/harness reads its processing mode, timeouts and buffer limit
// through this package, so the shipped config and the end-to-end tests cannot drift.
package envoy

import (
	"errors"
	"fmt"
	"os"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// The other extensions envoy.yaml uses (ext_proc and the connection manager are imported
	// above). Importing them registers their types, so that protojson can resolve the
	// typed_config Any payloads that name them.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// Load reads the bootstrap file at path and parses it with [Parse]. It does not validate it;
// call [Validate] for that.
func Load(path string) (*bootstrapv3.Bootstrap, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read bootstrap: %w", err)
	}
	b, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return b, nil
}

// Parse decodes a YAML (or JSON) bootstrap. Unknown fields, misspelled enum values and
// typed_config payloads whose @type is not a registered type are errors, as they are for Envoy.
func Parse(data []byte) (*bootstrapv3.Bootstrap, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("convert yaml to json: %w", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		return nil, fmt.Errorf("decode bootstrap: %w", err)
	}
	return b, nil
}

// validator is the method protoc-gen-validate generates on every Envoy message.
type validator interface {
	ValidateAll() error
}

// Validate runs the protoc-gen-validate rules of the bootstrap and, because those rules stop at
// google.protobuf.Any, of every typed_config payload inside it, at any depth (the HTTP filters
// inside the connection manager, for example). It returns all the violations found, joined.
func Validate(b *bootstrapv3.Bootstrap) error {
	var errs []error
	if err := b.ValidateAll(); err != nil {
		errs = append(errs, err)
	}
	validateAnys(b.ProtoReflect(), "bootstrap", &errs)
	return errors.Join(errs...)
}

// validateAnys unpacks and validates every google.protobuf.Any reachable from m through message,
// list and map fields, recursing into the unpacked payloads, and appends violations to errs.
func validateAnys(m protoreflect.Message, path string, errs *[]error) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s: unpack %s: %w", path, a.GetTypeUrl(), err))
			return
		}
		if v, ok := inner.(validator); ok {
			if err := v.ValidateAll(); err != nil {
				*errs = append(*errs, fmt.Errorf("%s (%s): %w", path, a.GetTypeUrl(), err))
			}
		}
		validateAnys(inner.ProtoReflect(), path, errs)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				validateAnys(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i), errs)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				validateAnys(mv.Message(), fmt.Sprintf("%s[%s]", p, k.String()), errs)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			validateAnys(v.Message(), p, errs)
		}
		return true
	})
}

// Clone returns a deep copy of b.
func Clone(b *bootstrapv3.Bootstrap) *bootstrapv3.Bootstrap {
	return proto.Clone(b).(*bootstrapv3.Bootstrap)
}

// ExtProcFilterName is the name and per-route config key of Envoy's ext_proc HTTP filter.
const ExtProcFilterName = "envoy.filters.http.ext_proc"

// Ingress is the part of a bootstrap that carries the ext_proc filter: the listener, its HTTP
// connection manager and the decoded filter config. The pointers alias the bootstrap's messages.
type Ingress struct {
	Listener *listenerv3.Listener
	HCM      *hcmv3.HttpConnectionManager
	// HCMAny is the listener's typed_config that HCM was decoded from; re-pack HCM into it after
	// changing HCM.
	HCMAny *anypb.Any
	// ExtProc is the decoded typed_config of the ext_proc filter.
	ExtProc *extprocv3.ExternalProcessor
	// ExtProcAny is the filter's typed_config that ExtProc was decoded from.
	ExtProcAny *anypb.Any
}

// FindIngress returns the one listener of b whose HTTP connection manager runs an ext_proc
// filter. It is an error if there is none or more than one.
func FindIngress(b *bootstrapv3.Bootstrap) (Ingress, error) {
	var found []Ingress
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, nf := range fc.GetFilters() {
				a := nf.GetTypedConfig()
				hcm := &hcmv3.HttpConnectionManager{}
				if a == nil || !a.MessageIs(hcm) {
					continue
				}
				if err := a.UnmarshalTo(hcm); err != nil {
					return Ingress{}, fmt.Errorf("listener %s: decode connection manager: %w", l.GetName(), err)
				}
				for _, hf := range hcm.GetHttpFilters() {
					ep := &extprocv3.ExternalProcessor{}
					if hf.GetTypedConfig() == nil || !hf.GetTypedConfig().MessageIs(ep) {
						continue
					}
					if err := hf.GetTypedConfig().UnmarshalTo(ep); err != nil {
						return Ingress{}, fmt.Errorf("listener %s: decode %s: %w", l.GetName(), hf.GetName(), err)
					}
					found = append(found, Ingress{Listener: l, HCM: hcm, HCMAny: a, ExtProc: ep, ExtProcAny: hf.GetTypedConfig()})
				}
			}
		}
	}
	switch len(found) {
	case 0:
		return Ingress{}, errors.New("find ingress: no listener runs an ext_proc filter")
	case 1:
		return found[0], nil
	default:
		return Ingress{}, fmt.Errorf("find ingress: %d ext_proc filters; expected one", len(found))
	}
}

// Cluster returns the static cluster of b named name, or nil.
func Cluster(b *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}
