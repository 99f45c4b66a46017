package sandbox

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseMemory parses a memory size such as OpenAI's "1g", "4g", "16g" or "64g". Suffixes k, m,
// g and t (any case, optionally followed by "b") are powers of 1024; a bare number is bytes.
func ParseMemory(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "b")
	if t == "" {
		return 0, fmt.Errorf("parse memory limit %q: empty", s)
	}
	shift := 0
	switch t[len(t)-1] {
	case 'k':
		shift = 10
	case 'm':
		shift = 20
	case 'g':
		shift = 30
	case 't':
		shift = 40
	}
	if shift > 0 {
		t = t[:len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse memory limit %q: %w", s, err)
	}
	if n <= 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("parse memory limit %q: out of range", s)
	}
	return n << shift, nil
}

// FormatMemory returns the canonical form of a size: in the largest unit that holds it exactly
// ("1g", "512m"), else a bare number of bytes. ParseMemory reads it back.
func FormatMemory(n int64) string {
	for _, u := range []struct {
		shift  uint
		suffix string
	}{{40, "t"}, {30, "g"}, {20, "m"}, {10, "k"}} {
		if n>>u.shift > 0 && n&(1<<u.shift-1) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
