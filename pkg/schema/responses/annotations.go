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
// /mnt/data/x.csv. The spans never overlap: a mention that a link starts inside is not one,
// and of two spans that overlap otherwise the first wins.
func (w *writtenFiles) cite(text string) []citation {
	return w.citeFrom(text, 0, 0)
}

// citeFrom is cite for the citations that start at or after byte from of text, cp the code
// points of text[:from]: what comes before from is settled (see citeLive), so a link whose
// label opens before it is not one.
func (w *writtenFiles) citeFrom(text string, from, cp int) []citation {
	if w.empty() || !strings.Contains(text[from:], dataDir) {
		return nil
	}
	type span struct {
		start, end int // bytes
		path       string
		bare       bool
	}
	var spans []span
	// Links: "](sandbox:/mnt/data/…)" with the label's "[" before it.
	for i := from; ; {
		j := strings.Index(text[i:], linkMarker)
		if j < 0 {
			break
		}
		j += i
		target := j + 2 + len(sandboxScheme)
		close := strings.IndexAny(text[target:], ") \n")
		open := strings.LastIndexByte(text[from:j], '[') + from // one before from is settled
		i = j + 2
		if close < 0 || text[target+close] != ')' || open < from || strings.ContainsAny(text[open+1:j], "]\n") {
			continue
		}
		if n := len(spans); n > 0 && open < spans[n-1].end {
			continue // its label opens inside the link before
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
	// Bare paths, outside the links: a mention overlaps no link.
	links := spans
	overlaps := func(start, end int) bool {
		// The first link that ends after start; links are in order and do not overlap.
		k, _ := slices.BinarySearchFunc(links, start, func(s span, at int) int {
			if s.end <= at {
				return -1
			}
			return 1
		})
		return k < len(links) && links[k].start < end
	}
	var bare []span
	for i := from; ; {
		j := strings.Index(text[i:], dataDir)
		if j < 0 {
			break
		}
		j += i
		i = j + len(dataDir)
		if j > 0 && pathByte(text[j-1]) {
			continue
		}
		best := w.longestAt(text, j)
		if best == "" {
			continue
		}
		start, end := j, j+len(best)
		if start-len(sandboxScheme) >= from && strings.HasSuffix(text[:j], sandboxScheme) &&
			!overlaps(start-len(sandboxScheme), end) {
			start -= len(sandboxScheme)
		}
		if overlaps(start, end) {
			continue
		}
		bare = append(bare, span{start: start, end: end, path: best, bare: true})
		i = end
	}
	if len(bare) > 0 {
		spans = append(spans, bare...)
		slices.SortStableFunc(spans, func(a, b span) int { return a.start - b.start })
	}
	out := make([]citation, 0, len(spans))
	// Code point indices, counted once along the text.
	pos, cps := from, cp
	at := func(b int) int {
		cps += utf8.RuneCountInString(text[pos:b])
		pos = b
		return cps
	}
	for _, s := range spans {
		if s.start < pos {
			continue // overlaps the span before: cannot happen, but an index must never go back
		}
		c := citation{file: w.byPath[s.path], filename: path.Base(s.path), byteStart: s.start, byteEnd: s.end, bare: s.bare}
		c.start = at(s.start)
		c.end = at(s.end)
		out = append(out, c)
	}
	return out
}

// linkMarker is what a link to a file of dataDir has between its label and its path.
const linkMarker = "](" + sandboxScheme + dataDir

// longestAt returns the longest written path that text mentions at i (where dataDir starts),
// or "". A mention ends where the path may end (see pathEnds), and never spans lines; each
// such end within the longest written path is looked up, so the work is bounded by that
// length, not by the number of files.
func (w *writtenFiles) longestAt(text string, i int) string {
	best := ""
	limit := min(len(text), i+w.longest)
	for e := i + len(dataDir) + 1; e <= limit; e++ {
		if e < len(text) {
			if c := text[e]; c == '\n' {
				limit = e // and check e itself below
			} else if pathByte(c) && !isPunct(c) {
				continue
			}
		}
		if _, ok := w.byPath[text[i:e]]; ok && pathEnds(text, e) {
			best = text[i:e]
		}
	}
	return best
}

// isPunct reports whether b is punctuation that may end a sentence right after a path.
func isPunct(b byte) bool {
	return b == '.' || b == ',' || b == ':' || b == ';' || b == '!' || b == '?'
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
// when no "[" before its end on its line may still open a link's label (the link would
// overlap it). A "[" before byte from is not one: what comes before from is settled (see
// livePart.take).
func (c citation) settled(text string, from int) bool {
	if !c.bare {
		return true
	}
	i := c.byteEnd
	for i < len(text) && isPunct(text[i]) {
		i++
	}
	if i >= len(text) {
		return false // the text may still continue the path
	}
	return !linkMayOpen(text, from, c.byteEnd)
}

// linkMayOpen reports whether the last "[" of text[from:end], on end's line, may still
// open a link to a file of dataDir as more text arrives: its line goes on, and its label is
// not closed yet or is closed by what is, or may become, a link's "](sandbox:/mnt/data/…)"
// whose target is not closed yet. A link's label is the text between the last "[" before its
// "](" and that "](", holding no "]": only the first "]" after the "[" may end it.
func linkMayOpen(text string, from, end int) bool {
	open := strings.LastIndexAny(text[from:end], "[\n")
	return open >= 0 && text[from+open] == '[' && mayOpenLink(text, from+open)
}

// mayOpenLink reports whether the "[" at open may still open a link to a file of dataDir as
// more text arrives (see linkMayOpen).
func mayOpenLink(text string, open int) bool {
	if strings.IndexByte(text[open:], '\n') >= 0 {
		return false // a link's label and target are on one line
	}
	k := strings.IndexByte(text[open:], ']')
	if k < 0 {
		return true
	}
	rest := text[open+k:]
	if len(rest) < len(linkMarker) {
		return strings.HasPrefix(linkMarker, rest)
	}
	return strings.HasPrefix(rest, linkMarker) && strings.IndexAny(rest[len(linkMarker):], ") \n") < 0
}

// quietUntil returns where the text from byte from on may still start a citation as more
// text arrives (text being a prefix of it), given that no citation of text starts before
// that point but ones settled: a "[" that may still open a link, or the last bytes, which may
// start a mention whose path is not all there yet. What comes before needs no scan again.
func (w *writtenFiles) quietUntil(text string, from int) int {
	// A mention that starts before x has all its path in text: cite found it, or never will.
	x := len(text) - (w.longest + len(sandboxScheme) + 1)
	for i := from; i < x; {
		k := strings.IndexByte(text[i:x], '[')
		if k < 0 {
			break
		}
		if mayOpenLink(text, i+k) {
			x = i + k
			break
		}
		i += k + 1
	}
	for x > from && x < len(text) && !utf8.RuneStart(text[x]) {
		x-- // code points are counted up to x
	}
	return max(x, from)
}

// livePart is an output_text part whose text is relayed as it streams: its text so far, how
// many citations of it were streamed, and how much of it needs no scan for them again.
type livePart struct {
	text  strings.Builder
	cited int
	// from is where the citations not streamed yet may start, in bytes; fromCP the code
	// points before it.
	from, fromCP int
}

// take returns the citations of text, the part's text so far, to stream now: those not
// streamed yet that are settled (see citation.settled; all of them when done), in the order
// of the text, up to the first that is not. Only the text from where the last one taken ends,
// or from where the text could still start one (see writtenFiles.quietUntil), is scanned: the
// work per delta does not grow with the text.
func (p *livePart) take(w *writtenFiles, text string, done bool) []citation {
	if w.empty() || p.from > len(text) {
		return nil // nothing to cite, or a text that is not the one streamed
	}
	cites := w.citeFrom(text, p.from, p.fromCP)
	n := 0
	for ; n < len(cites); n++ {
		c := cites[n]
		if !done && !c.settled(text, p.from) {
			break
		}
		p.from, p.fromCP = c.byteEnd, c.end
	}
	p.cited += n
	if !done {
		x := w.quietUntil(text, p.from)
		if n < len(cites) {
			x = min(x, cites[n].byteStart)
		}
		if x > p.from {
			p.fromCP += utf8.RuneCountInString(text[p.from:x])
			p.from = x
		}
	}
	return cites[:n]
}
