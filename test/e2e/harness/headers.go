package harness

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// header is one entry of a headerMap.
type header struct{ key, value string }

// headerMap is Envoy's header map as the filter sees it: lower-case keys, pseudo-headers
// first, repeated keys as repeated entries, insertion order kept. The zero value is empty.
type headerMap struct{ entries []header }

// hopByHop lists the connection-specific headers the connection manager and codecs drop
// rather than forward (they describe one HTTP/1 connection, not the message).
var hopByHop = []string{"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade", "trailer"}

func isHopByHop(key string) bool {
	for _, h := range hopByHop {
		if key == h {
			return true
		}
	}
	return false
}

// newHeaderMap builds a map with the given pseudo-headers (in order) followed by h's headers
// with lower-case keys, hop-by-hop headers dropped. Go's http.Header does not keep the wire
// order, so regular headers are sorted by key (values keep their order), which makes the
// messages the server sees deterministic.
func newHeaderMap(pseudo []header, h http.Header) *headerMap {
	m := &headerMap{entries: append([]header(nil), pseudo...)}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		lk := strings.ToLower(k)
		if isHopByHop(lk) {
			continue
		}
		for _, v := range h[k] {
			m.entries = append(m.entries, header{lk, v})
		}
	}
	return m
}

// get returns the first value of key.
func (m *headerMap) get(key string) (string, bool) {
	for _, e := range m.entries {
		if e.key == key {
			return e.value, true
		}
	}
	return "", false
}

func (m *headerMap) has(key string) bool {
	_, ok := m.get(key)
	return ok
}

func (m *headerMap) remove(key string) {
	out := m.entries[:0]
	for _, e := range m.entries {
		if e.key != key {
			out = append(out, e)
		}
	}
	m.entries = out
}

// add appends an entry; pseudo-headers go after the last pseudo-header, as Envoy keeps them
// first.
func (m *headerMap) add(key, value string) {
	if strings.HasPrefix(key, ":") {
		i := 0
		for i < len(m.entries) && strings.HasPrefix(m.entries[i].key, ":") {
			i++
		}
		m.entries = append(m.entries[:i], append([]header{{key, value}}, m.entries[i:]...)...)
		return
	}
	m.entries = append(m.entries, header{key, value})
}

// set replaces every value of key with value (Envoy's setCopy).
func (m *headerMap) set(key, value string) {
	m.remove(key)
	m.add(key, value)
}

func (m *headerMap) clone() *headerMap {
	return &headerMap{entries: append([]header(nil), m.entries...)}
}

// byteSize is Envoy's HeaderMap::byteSize: the sum of key and value lengths.
func (m *headerMap) byteSize() int {
	n := 0
	for _, e := range m.entries {
		n += len(e.key) + len(e.value)
	}
	return n
}

// proto renders the map as Envoy sends it to the server (§0): keys lower-case, values in
// raw_value only (runtime send_header_raw_value, default true since 1.27), value empty.
func (m *headerMap) proto() *corev3.HeaderMap {
	out := &corev3.HeaderMap{}
	for _, e := range m.entries {
		out.Headers = append(out.Headers, &corev3.HeaderValue{Key: e.key, RawValue: []byte(e.value)})
	}
	return out
}

// httpHeader copies the regular (non-pseudo, non-hop-by-hop) entries into an http.Header.
func (m *headerMap) httpHeader() http.Header {
	h := http.Header{}
	for _, e := range m.entries {
		if strings.HasPrefix(e.key, ":") || isHopByHop(e.key) {
			continue
		}
		h[http.CanonicalHeaderKey(e.key)] = append(h[http.CanonicalHeaderKey(e.key)], e.value)
	}
	return h
}

// checkOp and checkResult mirror Envoy's MutationRules::CheckOperation and CheckResult.
type checkOp int

const (
	opSet checkOp = iota
	opAppend
	opRemove
)

type checkResult int

const (
	checkOK checkResult = iota
	checkIgnore
	checkFail
)

// checker applies the filter's mutation_rules (HeaderMutationRules) the way Envoy's
// filters/common/mutation_rules/mutation_rules.cc does (§3.2). The zero value applies the
// defaults: everything allowed except host/:authority/:method/:scheme and x-envoy-*; ":"
// headers may be set but not appended or removed.
type checker struct {
	rules             *mutationrulesv3.HeaderMutationRules
	allowExp, denyExp *regexp.Regexp
}

// newChecker compiles the rules' expressions. Envoy's regex matchers are RE2 full matches,
// which Go's regexp (also RE2) reproduces with anchors.
func newChecker(rules *mutationrulesv3.HeaderMutationRules) (checker, error) {
	c := checker{rules: rules}
	if re := rules.GetAllowExpression().GetRegex(); rules.GetAllowExpression() != nil {
		x, err := regexp.Compile("^(?:" + re + ")$")
		if err != nil {
			return checker{}, fmt.Errorf("compile allow_expression: %w", err)
		}
		c.allowExp = x
	}
	if re := rules.GetDisallowExpression().GetRegex(); rules.GetDisallowExpression() != nil {
		x, err := regexp.Compile("^(?:" + re + ")$")
		if err != nil {
			return checker{}, fmt.Errorf("compile disallow_expression: %w", err)
		}
		c.denyExp = x
	}
	return c, nil
}

func (c checker) check(op checkOp, name, value string) checkResult {
	if c.allowed(op, name) && (op == opRemove || validValue(name, value)) {
		return checkOK
	}
	if c.rules.GetDisallowIsError().GetValue() {
		return checkFail
	}
	return checkIgnore
}

func (c checker) allowed(op checkOp, name string) bool {
	if op == opRemove && (strings.HasPrefix(name, ":") || name == "host") {
		// No matter what, "host" and ":" headers cannot be removed.
		return false
	}
	if c.denyExp != nil && c.denyExp.MatchString(name) {
		return false
	}
	if c.allowExp != nil && c.allowExp.MatchString(name) {
		return true
	}
	if c.rules.GetDisallowAll().GetValue() {
		return false
	}
	if !c.rules.GetAllowAllRouting().GetValue() && (name == "host" || name == ":authority" || name == ":method" || name == ":scheme") {
		return false
	}
	if strings.HasPrefix(name, ":") && (op == opAppend || c.rules.GetDisallowSystem().GetValue()) {
		return false
	}
	if !c.rules.GetAllowEnvoy().GetValue() && strings.HasPrefix(name, "x-envoy-") {
		return false
	}
	return true
}

// validValue is Checker::isValidValue.
func validValue(name, value string) bool {
	if !strings.HasPrefix(name, ":") && !headerValueIsValid(value) {
		return false
	}
	switch name {
	case "host", ":authority":
		return value != "" && !strings.ContainsAny(value, " /?#@\t\r\n")
	case ":scheme":
		return value == "http" || value == "https"
	case ":status":
		n, err := strconv.ParseUint(value, 10, 32)
		return err == nil && n >= 200
	}
	return true
}

// headerNameIsValid is Envoy's HeaderUtility::headerNameIsValid: a non-empty token; for
// pseudo-headers the part after ':' must be a non-empty lower-case token (HTTP/2 rules); other
// names may contain upper case (HTTP/1 rules).
func headerNameIsValid(name string) bool {
	pseudo := strings.HasPrefix(name, ":")
	if pseudo {
		name = name[1:]
	}
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isTokenChar(c) || (pseudo && 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// headerValueIsValid is nghttp2_check_header_value as Envoy uses it: NUL, CR and LF are the
// only forbidden bytes.
func headerValueIsValid(v string) bool {
	return !strings.ContainsAny(v, "\x00\r\n")
}

// headerLimits are the connection manager's header limits (max_headers_count,
// max_request_headers_kb); Envoy applies the same numbers to mutated response headers.
type headerLimits struct {
	count int
	kb    int
}

// errMutation marks an invalid mutation: Envoy answers it with status_on_error and the message
// as details (§3.1), never treating it as a spurious message.
var errMutation = errors.New("invalid mutation")

// mutationError is an invalid-mutation error whose text is exactly Envoy's message.
type mutationError struct{ msg string }

func (e *mutationError) Error() string { return e.msg }
func (e *mutationError) Unwrap() error { return errMutation }

// applyHeaderMutations is MutationUtils::applyHeaderMutations (§3.1): count check, all
// removals, all sets, final size check. replacing reports whether the response is
// CONTINUE_AND_REPLACE (which may set :method); removeCL reports whether the CL-removal rule
// applies (§3.4), in which case a content-length in set_headers is skipped. rejected counts the
// mutations the rules ignored or refused.
func applyHeaderMutations(mut *extprocsvc.HeaderMutation, m *headerMap, replacing bool, c checker, removeCL bool, lim headerLimits, rejected func()) error {
	if len(mut.GetRemoveHeaders()) > lim.count || len(mut.GetSetHeaders()) > lim.count {
		rejected()
		return &mutationError{fmt.Sprintf("Header mutation remove header count %d or set header count %d exceed the HCM header countlimit %d",
			len(mut.GetRemoveHeaders()), len(mut.GetSetHeaders()), lim.count)}
	}
	for _, name := range mut.GetRemoveHeaders() {
		if !headerNameIsValid(name) {
			rejected()
			return &mutationError{"Invalid character in remove_headers mutation."}
		}
		name = strings.ToLower(name)
		switch c.check(opRemove, name, "") {
		case checkOK:
			m.remove(name)
		case checkIgnore:
			rejected()
		case checkFail:
			rejected()
			return &mutationError{"Invalid attempt to remove " + name}
		}
	}
	for _, sh := range mut.GetSetHeaders() {
		h := sh.GetHeader()
		if h == nil {
			continue
		}
		if removeCL && strings.EqualFold(h.GetKey(), "content-length") {
			continue
		}
		// Only raw_value is read (runtime send_header_raw_value, default true): a server that
		// sets only value produces an empty header value (envoy#31555, §7.1), and one that sets
		// both gets raw_value (Envoy 1.40, §3.1; older versions made that an error).
		value := string(h.GetRawValue())
		if !headerNameIsValid(h.GetKey()) || !headerValueIsValid(value) {
			rejected()
			return &mutationError{"Invalid character in set_headers mutation."}
		}
		name := strings.ToLower(h.GetKey())
		// append_action is ignored; append defaults to false, i.e. replace (§3.1).
		appendVal := sh.GetAppend().GetValue()
		op := opSet
		if appendVal && m.has(name) {
			op = opAppend
		}
		res := c.check(op, name, value)
		if replacing && name == ":method" {
			res = checkOK
		}
		switch res {
		case checkOK:
			if appendVal {
				m.add(name, value)
			} else {
				m.set(name, value)
			}
		case checkIgnore:
			rejected()
		case checkFail:
			rejected()
			return &mutationError{"Invalid attempt to modify " + name}
		}
	}
	if m.byteSize() > lim.kb*1024 || len(m.entries) > lim.count {
		rejected()
		return &mutationError{fmt.Sprintf("Header mutation causes end result header count %d or header size %d bytes, exceeding the count limit %d or the size limit %d kilobytes",
			len(m.entries), m.byteSize(), lim.count, lim.kb)}
	}
	return nil
}

// applyBodyMutation is MutationUtils::applyBodyMutations (§4.1).
func applyBodyMutation(mut *extprocsvc.BodyMutation, body []byte) []byte {
	switch x := mut.GetMutation().(type) {
	case *extprocsvc.BodyMutation_ClearBody:
		if x.ClearBody {
			return []byte{}
		}
	case *extprocsvc.BodyMutation_Body:
		return append([]byte{}, x.Body...)
	}
	return body
}
