package skills

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Bounds of SKILL.md's front matter, as the Agent Skills specification (agentskills.io, which
// OpenAI's skills follow) states them.
const (
	maxName        = 64
	maxDescription = 1024
	// maxFrontMatter bounds the YAML parsed (ours).
	maxFrontMatter = 64 << 10
)

// parseFrontMatter reads the YAML front matter of a SKILL.md (between a first line "---" and
// the next line "---"): name (1–64 lowercase letters, digits and hyphens, no hyphen at either
// end, no two in a row) and description (1–1024 characters), both required.
func parseFrontMatter(md []byte) (name, description string, err error) {
	md = bytes.TrimPrefix(md, []byte("\xef\xbb\xbf"))
	md = bytes.ReplaceAll(md, []byte("\r\n"), []byte("\n"))
	rest, ok := bytes.CutPrefix(md, []byte("---\n"))
	if !ok {
		return "", "", invalid("SKILL.md has no front matter: it must start with a line '---', then 'name:' and 'description:', then a line '---'.")
	}
	var fm []byte
	if bytes.HasPrefix(rest, []byte("---\n")) || bytes.Equal(rest, []byte("---")) {
		fm = nil
	} else if i := bytes.Index(rest, []byte("\n---")); i >= 0 && (i+4 == len(rest) || rest[i+4] == '\n' || rest[i+4] == '\r') {
		fm = rest[:i+1]
	} else {
		return "", "", invalid("SKILL.md's front matter is not closed by a line '---'.")
	}
	if len(fm) > maxFrontMatter {
		return "", "", invalid("SKILL.md's front matter is longer than %d bytes.", maxFrontMatter)
	}
	var v struct {
		Name        any `json:"name"`
		Description any `json:"description"`
	}
	if err := yaml.Unmarshal(fm, &v); err != nil {
		return "", "", invalid("SKILL.md's front matter is not valid YAML.")
	}
	n, ok := v.Name.(string)
	if !ok || n == "" {
		return "", "", invalid("SKILL.md's front matter has no 'name' (a string).")
	}
	d, ok := v.Description.(string)
	if !ok || strings.TrimSpace(d) == "" {
		return "", "", invalid("SKILL.md's front matter has no 'description' (a string).")
	}
	if !validName(n) {
		return "", "", invalid("SKILL.md's 'name' %q is invalid: at most %d lowercase letters, digits and hyphens, not starting or ending with a hyphen, with no two hyphens in a row.", printable(n), maxName)
	}
	if utf8.RuneCountInString(d) > maxDescription {
		return "", "", invalid("SKILL.md's 'description' is longer than %d characters.", maxDescription)
	}
	return n, strings.TrimSpace(d), nil
}

func validName(n string) bool {
	if n == "" || len(n) > maxName || n[0] == '-' || n[len(n)-1] == '-' || strings.Contains(n, "--") {
		return false
	}
	for _, c := range []byte(n) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}
