// Package docs holds the pages a person reads (README.md links them) and the test that keeps them
// true: every link resolves, every make target they name exists, every configuration example
// loads.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/config"
)

// pages returns README.md and every page of docs/, by path from the repository root, with
// their text.
func pages(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob("*.md")
	require.NoError(t, err)
	out := map[string]string{}
	for _, n := range append(names, "../README.md") {
		b, err := os.ReadFile(n)
		require.NoError(t, err)
		out[filepath.Clean(filepath.Join("docs", n))] = string(b)
	}
	require.Greater(t, len(out), 5, "the docs pages")
	return out
}

var (
	link      = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	makeCmd   = regexp.MustCompile("(?m)(?:^|`)make ([a-z][a-z0-9-]*)")
	target    = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
	heading   = regexp.MustCompile(`(?m)^#+ (.+)$`)
	yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")
)

// anchor is the GitHub anchor of a heading.
func anchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ' || r == '-':
			b.WriteRune('-')
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLinks checks that every relative link of the pages names a file of the repository, and
// an anchor of it when it has one.
func TestLinks(t *testing.T) {
	all := pages(t)
	for page, text := range all {
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "sandbox:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Clean(filepath.Join(filepath.Dir(page), file))
				_, err := os.Stat(filepath.Join("..", path))
				if !assert.NoError(t, err, "%s links %s", page, target) {
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			linked, ok := all[path]
			if !assert.True(t, ok, "%s links %s, a page outside docs/", page, target) {
				continue
			}
			var anchors []string
			for _, h := range heading.FindAllStringSubmatch(linked, -1) {
				anchors = append(anchors, anchor(h[1]))
			}
			assert.Contains(t, anchors, frag, "%s links %s: no such heading", page, target)
		}
	}
}

// TestMakeTargets checks that every `make TARGET` the pages name is a target of the Makefile.
func TestMakeTargets(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	require.NoError(t, err)
	targets := map[string]bool{}
	for _, m := range target.FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	for page, text := range pages(t) {
		for _, m := range makeCmd.FindAllStringSubmatch(text, -1) {
			assert.True(t, targets[m[1]], "%s names `make %s`, which the Makefile does not have", page, m[1])
		}
	}
}

// TestConfigKeys checks that every dotted configuration key the pages name in backquotes
// (`sandbox.local.first_uid`, `default_profile.loop_deadline`, `profiles.<name>.run_timeout`)
// is a field of the configuration.
func TestConfigKeys(t *testing.T) {
	key := regexp.MustCompile("`((?:sandbox|default_profile|profiles|api_key_check)\\.[a-z_.<>]+)`")
	n := 0
	for page, text := range pages(t) {
		for _, m := range key.FindAllStringSubmatch(text, -1) {
			n++
			md := (&configv1.Config{}).ProtoReflect().Descriptor()
			parts := strings.Split(m[1], ".")
			for i := 0; i < len(parts); i++ {
				if parts[i] == "<name>" {
					continue
				}
				fd := md.Fields().ByName(protoreflect.Name(parts[i]))
				if !assert.NotNil(t, fd, "%s names `%s`: %q is not a configuration field", page, m[1], parts[i]) {
					break
				}
				if fd.Message() == nil || fd.IsMap() && fd.MapValue().Message() == nil {
					assert.Equal(t, len(parts)-1, i, "%s names `%s`: %q has no fields", page, m[1], parts[i])
					break
				}
				md = fd.Message()
				if fd.IsMap() {
					md = fd.MapValue().Message()
				}
			}
		}
	}
	assert.Positive(t, n, "configuration keys found")
}

// fileKey matches a configuration line naming a file (fleet_secret_file: /etc/…).
var fileKey = regexp.MustCompile(`(?m)^(\s*[a-z_]+_file:\s*)\S+\s*$`)

// TestConfigExamples loads every YAML block of the pages that reads as a server configuration
// (its first key is one of the configuration's) as the server would: unknown keys and bad values
// fail.
func TestConfigExamples(t *testing.T) {
	n := 0
	for page, text := range pages(t) {
		for _, m := range yamlBlock.FindAllStringSubmatch(text, -1) {
			block := m[1]
			key, _, _ := strings.Cut(block, ":")
			if (&configv1.Config{}).ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(key)) == nil {
				continue
			}
			n++
			// A file an example names (a secret, a password) is one of the reader's machine:
			// give it one.
			secret := filepath.Join(t.TempDir(), "secret")
			require.NoError(t, os.WriteFile(secret, []byte(strings.Repeat("s", 64)), 0o600))
			block = fileKey.ReplaceAllString(block, "${1}"+secret)
			var cfg configv1.Config
			if !assert.NoError(t, config.Parse([]byte(block), &cfg), "%s: configuration example:\n%s", page, block) {
				continue
			}
			config.ApplyDefaults(&cfg)
			assert.NoError(t, config.Validate(&cfg), "%s: configuration example:\n%s", page, block)
		}
	}
	assert.Positive(t, n, "configuration examples found")
}
