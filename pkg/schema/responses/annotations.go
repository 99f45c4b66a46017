package responses

import (
	"net/url"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
)

// citedFile is a container file a message may cite: a file the request's code wrote.
type citedFile struct {
	containerID, fileID string
}

// writtenFiles are the files the request's calls wrote so far, by path; the latest write of
// a path wins. The zero value is empty.
type writtenFiles struct {
	byPath map[string]citedFile
	// longest is the length of the longest path, which bounds the bare-path search.
	longest int
}

// add records the files call wrote. Files without a container file id cannot be cited.
func (w *writtenFiles) add(c *schema.CodeCall) {
	for _, f := range c.Files {
		if f.ID == "" || !strings.HasPrefix(f.Path, dataDir) {
			continue
		}
		if w.byPath == nil {
			w.byPath = make(map[string]citedFile)
		}
		w.byPath[f.Path] = citedFile{containerID: c.ContainerID, fileID: f.ID}
		w.longest = max(w.longest, len(f.Path))
	}
}

// empty reports whether no file can be cited.
func (w *writtenFiles) empty() bool { return len(w.byPath) == 0 }

// dataDir is where the files a message may cite live.
const dataDir = "/mnt/data/"

// sandboxScheme prefixes a file's path in the links the model writes.
const sandboxScheme = "sandbox:"

// citation is one container_file_citation of an output_text, its span in code points (as the
// native API counts them: Python str indices) with end exclusive.
type citation struct {
	file       citedFile
	filename   string
	start, end int
	// byteEnd is where the span ends in the text, in bytes; bare reports a mention of the path
	// rather than a link.
	byteStart, byteEnd int
	bare               bool
}

// appendJSON appends the annotation object.
func (c citation) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"type":"container_file_citation","container_id":`...)
	dst = jsonscan.AppendString(dst, c.file.containerID)
	dst = append(dst, `,"file_id":`...)
	dst = jsonscan.AppendString(dst, c.file.fileID)
	dst = append(dst, `,"filename":`...)
	dst = jsonscan.AppendString(dst, c.filename)
	dst = append(dst, `,"start_index":`...)
	dst = appendInt(dst, c.start)
	dst = append(dst, `,"end_index":`...)
	dst = appendInt(dst, c.end)
	return append(dst, '}')
}

func appendInt(dst []byte, n int) []byte {
	var buf [20]byte
	i := len(buf)
	if n == 0 {
		return append(dst, '0')
	}
	for ; n > 0; n /= 10 {
		i--
		buf[i] = byte('0' + n%10)
	}
	return append(dst, buf[i:]...)
}

// cite returns the citations of text: each markdown link [label](sandbox:/mnt/data/…) to a
// written file (the span is the whole link, as natively), and each bare mention of a written
// file's path (with its sandbox: prefix, if any) outside such a link, in the order they
// appear. A mention counts only when the path ends there: /mnt/data/x.csvfoo does not cite
// /mnt/data/x.csv.
func (w *writtenFiles) cite(text string) []citation {
	if w.empty() || !strings.Contains(text, dataDir) {
		return nil
	}
	type span struct {
		start, end int // bytes
		path       string
		bare       bool
	}
	var spans []span
	// Links: "](sandbox:/mnt/data/…)" with the label's "[" before it.
	for i := 0; ; {
		j := strings.Index(text[i:], "]("+sandboxScheme+dataDir)
		if j < 0 {
			break
		}
		j += i
		target := j + 2 + len(sandboxScheme)
		close := strings.IndexAny(text[target:], ") \n")
		open := strings.LastIndexByte(text[:j], '[')
		i = j + 2
		if close < 0 || text[target+close] != ')' || open < 0 || strings.ContainsAny(text[open+1:j], "]\n") {
			continue
		}
		raw := text[target : target+close]
		p, err := url.PathUnescape(raw)
		if err != nil {
			p = raw
		}
		if _, ok := w.byPath[p]; !ok {
			continue
		}
		spans = append(spans, span{start: open, end: target + close + 1, path: p})
		i = target + close + 1
	}
	// Bare paths, outside the links.
	inLink := func(at int) bool {
		for _, s := range spans {
			if at >= s.start && at < s.end {
				return true
			}
		}
		return false
	}
	links := len(spans)
	for i := 0; ; {
		j := strings.Index(text[i:], dataDir)
		if j < 0 {
			break
		}
		j += i
		i = j + len(dataDir)
		if inLink(j) || (j > 0 && pathByte(text[j-1])) {
			continue
		}
		// The longest written path that ends here.
		best := ""
		for p := range w.byPath {
			if len(p) > len(best) && strings.HasPrefix(text[j:], p) && pathEnds(text, j+len(p)) {
				best = p
			}
		}
		if best == "" {
			continue
		}
		start := j
		if strings.HasSuffix(text[:j], sandboxScheme) && !inLink(j-len(sandboxScheme)) {
			start = j - len(sandboxScheme)
		}
		spans = append(spans, span{start: start, end: j + len(best), path: best, bare: true})
		i = j + len(best)
	}
	if len(spans) > links {
		slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	}
	out := make([]citation, 0, len(spans))
	// Code point indices, counted once along the text.
	pos, cps := 0, 0
	at := func(b int) int {
		cps += utf8.RuneCountInString(text[pos:b])
		pos = b
		return cps
	}
	for _, s := range spans {
		c := citation{file: w.byPath[s.path], filename: path.Base(s.path), byteStart: s.start, byteEnd: s.end, bare: s.bare}
		c.start = at(s.start)
		c.end = at(s.end)
		out = append(out, c)
	}
	return out
}

// pathByte reports whether b may be part of a file path in running text.
func pathByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' ||
		b == '_' || b == '-' || b == '/' || b == '.' || b == '%' || b == '~' || b >= utf8.RuneSelf
}

// pathEnds reports whether a path mentioned in text ends at i: the text ends, or what follows
// cannot continue the path (a sentence's full stop or comma followed by a space counts as the
// end).
func pathEnds(text string, i int) bool {
	for ; i < len(text); i++ {
		switch c := text[i]; {
		case c == '.' || c == ',' || c == ':' || c == ';' || c == '!' || c == '?':
			continue // punctuation: the path ends if what follows it does not continue it
		case pathByte(c):
			return false
		default:
			return true
		}
	}
	return true
}

// annotateMessage returns a Responses message item (raw JSON) with the citations of each of
// its output_text parts appended to the part's annotations, and whether it changed.
func annotateMessage(w *openai.Writer, item string, files *writtenFiles) (string, bool) {
	if files.empty() || !strings.Contains(item, dataDir) {
		return item, false
	}
	changed := false
	j := 0
	gjson.Get(item, "content").ForEach(func(_, part gjson.Result) bool {
		k := j
		j++
		if part.Get("type").String() != "output_text" {
			return true
		}
		anns, ok := annotatedList(part, files)
		if !ok {
			return true
		}
		item = w.Edit(item, "content."+itoa(k)+".annotations", anns, true)
		changed = true
		return true
	})
	return item, changed
}

// annotatedList returns the annotations of an output_text part with its citations appended,
// as JSON, and whether there are any citations.
func annotatedList(part gjson.Result, files *writtenFiles) (string, bool) {
	cites := files.cite(part.Get("text").String())
	if len(cites) == 0 {
		return "", false
	}
	return appendCitations(part.Get("annotations"), cites), true
}

// appendCitations returns the annotations array existing (absent or null: none) with cites
// appended, as JSON.
func appendCitations(existing gjson.Result, cites []citation) string {
	out := make([]byte, 0, 64+len(existing.Raw)+160*len(cites))
	out = append(out, '[')
	n := 0
	existing.ForEach(func(_, a gjson.Result) bool {
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, a.Raw...)
		n++
		return true
	})
	for _, c := range cites {
		if n > 0 {
			out = append(out, ',')
		}
		out = c.appendJSON(out)
		n++
	}
	return string(append(out, ']'))
}

func itoa(n int) string { return string(appendInt(nil, n)) }

// settled reports whether c, a citation of text, stays one whatever text follows: a link is
// complete once its ")" has arrived; a bare mention once what follows it ends the path, and
// when no "[" before it on its line is still open (it may become a link's label).
func (c citation) settled(text string) bool {
	if !c.bare {
		return true
	}
	i := c.byteEnd
	for i < len(text) && strings.IndexByte(".,:;!?", text[i]) >= 0 {
		i++
	}
	if i >= len(text) {
		return false // the text may still continue the path
	}
	if open := strings.LastIndexByte(text[:c.byteStart], '['); open >= 0 && !strings.ContainsAny(text[open:c.byteStart], "]\n") {
		return false
	}
	return true
}
