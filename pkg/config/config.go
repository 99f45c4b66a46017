// Package config loads the server configuration (the codeinterp.config.v1.Config proto) from YAML,
// fills in the defaults the proto documents, validates it with errors that name the field, and
// resolves the per-route profiles into plain Go values.
//
// It is a leaf: it imports no other package of this repository but the generated proto, so
// whatever reads a configuration links no sandbox backend, loop or API surface. Each of those
// packages owns the zero-value defaults of its own Config; the defaults here are the proto's
// documented ones, and internal/app, the one place that maps the configuration onto the
// packages' configs, checks that the two agree. Validation that needs a package's knowledge
// (the memory sizes a container may have) is internal/app's too.
package config

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"sigs.k8s.io/yaml"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
)

// Load reads the YAML file at path (an empty path means no file), decodes it into a Config through
// the protobuf JSON mapping, and returns it without defaults applied. Unknown fields are errors.
func Load(path string) (*configv1.Config, error) {
	cfg := &configv1.Config{}
	if path == "" {
		return cfg, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if err := Parse(raw, cfg); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes YAML (or JSON) bytes into cfg. Field names may be the proto's snake_case names or
// their lowerCamelCase JSON names; durations may be written as Go durations ("90s", "20m", "1h").
// Errors name the offending field by its path, for example "sandbox.local.cpu_seconds".
func Parse(raw []byte, cfg *configv1.Config) error {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return fmt.Errorf("parse yaml: %w", err)
	}
	var tree any
	if err := json.Unmarshal(js, &tree); err != nil {
		return fmt.Errorf("parse yaml: %w", err)
	}
	if tree == nil {
		return nil
	}
	norm, err := normalize(cfg.ProtoReflect().Descriptor(), tree, "")
	if err != nil {
		return err
	}
	js, err = json.Marshal(norm)
	if err != nil {
		return fmt.Errorf("re-encode: %w", err)
	}
	if err := protojson.Unmarshal(js, cfg); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}

// normalize checks v against the message descriptor md, naming the field path in errors, and turns
// Go-style durations into the protobuf JSON form.
func normalize(md protoreflect.MessageDescriptor, v any, path string) (any, error) {
	if md.FullName() == "google.protobuf.Duration" {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s: want a duration such as \"30s\", got %v", path, v)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a duration (for example \"30s\", \"20m\")", path, s)
		}
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s", nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a mapping, got %v", displayPath(path), v)
	}
	out := make(map[string]any, len(obj))
	for key, val := range obj {
		fd := md.Fields().ByName(protoreflect.Name(key))
		if fd == nil {
			fd = md.Fields().ByJSONName(key)
		}
		sub := joinPath(path, key)
		if fd == nil {
			return nil, fmt.Errorf("%s: unknown field", sub)
		}
		sub = joinPath(path, string(fd.Name()))
		nv, err := normalizeField(fd, val, sub)
		if err != nil {
			return nil, err
		}
		out[string(fd.Name())] = nv
	}
	return out, nil
}

func normalizeField(fd protoreflect.FieldDescriptor, v any, path string) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch {
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: want a mapping, got %v", path, v)
		}
		out := make(map[string]any, len(obj))
		for k, item := range obj {
			nv, err := normalizeValue(fd.MapValue(), item, fmt.Sprintf("%s[%q]", path, k))
			if err != nil {
				return nil, err
			}
			out[k] = nv
		}
		return out, nil
	case fd.IsList():
		list, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%s: want a list, got %v", path, v)
		}
		out := make([]any, len(list))
		for i, item := range list {
			nv, err := normalizeValue(fd, item, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = nv
		}
		return out, nil
	default:
		return normalizeValue(fd, v, path)
	}
}

func normalizeValue(fd protoreflect.FieldDescriptor, v any, path string) (any, error) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return normalize(fd.Message(), v, path)
	case protoreflect.StringKind:
		if _, ok := v.(string); !ok {
			return nil, fmt.Errorf("%s: want a string, got %v", path, v)
		}
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			return nil, fmt.Errorf("%s: want true or false, got %v", path, v)
		}
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		f, ok := v.(float64)
		if !ok || f < 0 || f != float64(uint64(f)) {
			return nil, fmt.Errorf("%s: want a whole number ≥ 0, got %v", path, v)
		}
		if fd.Kind() == protoreflect.Uint32Kind && f > float64(^uint32(0)) {
			return nil, fmt.Errorf("%s: %v is too large", path, v)
		}
	}
	return v, nil
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func displayPath(path string) string {
	if path == "" {
		return "config"
	}
	return path
}
