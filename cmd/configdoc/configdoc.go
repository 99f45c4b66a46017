package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
)

// run parses args and writes the reference of the configuration proto to -out.
func run(args []string) error {
	fs := flag.NewFlagSet("configdoc", flag.ContinueOnError)
	var (
		api = fs.String("api", "api", "the `directory` the proto files' paths are relative to")
		out = fs.String("out", "", "where to write the page (\"-\" or empty: standard output)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	file := configv1.File_codeinterp_config_v1_config_proto
	src := filepath.Join(*api, file.Path())
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	comments, err := parseComments(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	page := render(file, filepath.ToSlash(src), comments)
	if *out == "" || *out == "-" {
		_, err = io.WriteString(os.Stdout, page)
		return err
	}
	return os.WriteFile(*out, []byte(page), 0o644)
}

// Lines of a .proto file that parseComments tells apart.
var (
	packageLine = regexp.MustCompile(`^package\s+([\w.]+)\s*;`)
	messageLine = regexp.MustCompile(`^message\s+(\w+)\s*\{`)
	fieldLine   = regexp.MustCompile(`^(?:optional\s+|repeated\s+)?(?:map\s*<[^>]*>|[\w.]+)\s+(\w+)\s*=\s*\d+\s*(?:\[[^\]]*\])?\s*;`)
)

// parseComments returns the leading comment of the package, of each message and of each field of
// a .proto file, by full name ("codeinterp.config.v1.Config", "codeinterp.config.v1.Config.listen";
// the package's under ""). A comment is the run of // lines right above the declaration; a
// blank line ends a run, and an empty // line in it is a paragraph break (kept as "\n\n").
// It knows the subset of the language config.proto uses: one declaration per line, messages
// nested or not, no enums or oneofs.
func parseComments(r io.Reader) (map[string]string, error) {
	out := map[string]string{}
	var (
		pkg     string
		scope   []string // the names of the messages the line is in
		pending []string // the comment lines above the current line
	)
	full := func(name string) string {
		return strings.Join(append(append([]string{pkg}, scope...), name), ".")
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if c, ok := strings.CutPrefix(line, "//"); ok {
			pending = append(pending, strings.TrimPrefix(c, " "))
			continue
		}
		pkgM, msgM, fieldM := packageLine.FindStringSubmatch(line), messageLine.FindStringSubmatch(line), fieldLine.FindStringSubmatch(line)
		switch {
		case pkgM != nil:
			pkg = pkgM[1]
			out[""] = paragraphs(pending)
		case msgM != nil:
			out[full(msgM[1])] = paragraphs(pending)
			scope = append(scope, msgM[1])
		case fieldM != nil && len(scope) > 0 && len(pending) > 0:
			out[full(fieldM[1])] = paragraphs(pending)
		case line == "}" && len(scope) > 0:
			scope = scope[:len(scope)-1]
		}
		pending = nil
	}
	return out, sc.Err()
}

// paragraphs joins comment lines into paragraphs separated by "\n\n".
func paragraphs(lines []string) string {
	var paras []string
	var cur []string
	for _, l := range append(lines, "") {
		if strings.TrimSpace(l) == "" {
			if len(cur) > 0 {
				paras = append(paras, strings.Join(cur, " "))
				cur = nil
			}
			continue
		}
		cur = append(cur, strings.TrimSpace(l))
	}
	return strings.Join(paras, "\n\n")
}

// section is one message of the configuration as the page shows it: where it sits in the YAML.
type section struct {
	md     protoreflect.MessageDescriptor
	places []string // its YAML paths ("" for the top level), the first the one its fields are shown under
}

// sections returns the messages reachable from root, root first, then in the order their fields
// first name them (breadth first), each with every place it sits.
func sections(root protoreflect.MessageDescriptor) []*section {
	byName := map[protoreflect.FullName]*section{}
	order := []*section{{md: root, places: []string{""}}}
	byName[root.FullName()] = order[0]
	for i := 0; i < len(order); i++ {
		s := order[i]
		fields := s.md.Fields()
		for j := range fields.Len() {
			fd := fields.Get(j)
			md, place := fieldMessage(fd), join(s.places[0], string(fd.Name()))
			if md == nil || md.FullName() == "google.protobuf.Duration" {
				continue
			}
			if fd.IsMap() {
				place += ".<name>"
			}
			if t, ok := byName[md.FullName()]; ok {
				t.places = append(t.places, place)
				continue
			}
			t := &section{md: md, places: []string{place}}
			byName[md.FullName()] = t
			order = append(order, t)
		}
	}
	return order
}

// fieldMessage returns the message a field holds (a map's value), or nil.
func fieldMessage(fd protoreflect.FieldDescriptor) protoreflect.MessageDescriptor {
	if fd.IsMap() {
		fd = fd.MapValue()
	}
	if fd.Kind() == protoreflect.MessageKind {
		return fd.Message()
	}
	return nil
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// render writes the page for file, whose source is src, from its comments.
func render(file protoreflect.FileDescriptor, src string, comments map[string]string) string {
	root := file.Messages().ByName("Config")
	secs := sections(root)
	var b strings.Builder
	fmt.Fprintf(&b, "# Configuration reference\n\n")
	fmt.Fprintf(&b, "<!-- Generated by `make docs` (cmd/configdoc) from %s; edit the proto, then run `make docs`. -->\n\n", src)
	if c := comments[""]; c != "" {
		fmt.Fprintf(&b, "%s\n\n", text(strings.Replace(c, "Package "+string(file.Package())+" is", "`"+string(file.Package())+"` is", 1)))
	}
	fmt.Fprintf(&b, "The schema is [`%s`](../%s). Sections:\n\n", src, src)
	for _, s := range secs {
		fmt.Fprintf(&b, "- [%s](#%s)\n", title(s), anchor(title(s)))
	}
	b.WriteString("\n")
	titles := map[protoreflect.FullName]string{}
	for _, s := range secs {
		titles[s.md.FullName()] = title(s)
	}
	for _, s := range secs {
		fmt.Fprintf(&b, "## %s\n\n", title(s))
		if c := comments[string(s.md.FullName())]; c != "" {
			fmt.Fprintf(&b, "%s\n\n", text(c))
		}
		if len(s.places) > 1 {
			fmt.Fprintf(&b, "Its fields are shown under `%s`; they are the same under %s.\n\n", s.places[0], quoteAll(s.places[1:]))
		}
		fields := s.md.Fields()
		for i := 0; i < fields.Len(); {
			// A field without a comment of its own shares the one above it (first_uid and uid_count).
			group := []protoreflect.FieldDescriptor{fields.Get(i)}
			for i++; i < fields.Len() && comments[string(fields.Get(i).FullName())] == ""; i++ {
				group = append(group, fields.Get(i))
			}
			var names, kinds []string
			for _, fd := range group {
				names = append(names, "`"+join(s.places[0], string(fd.Name()))+"`")
				k := "*" + kind(fd) + "*"
				if fd.JSONName() != string(fd.Name()) {
					k += fmt.Sprintf(" (also written `%s`)", fd.JSONName())
				}
				if fd.HasPresence() && fieldMessage(fd) == nil {
					k += fmt.Sprintf(", optional: an explicit `%s` is kept, not replaced by the default", zero(fd))
				}
				if md := fieldMessage(fd); md != nil && titles[md.FullName()] != "" {
					k += fmt.Sprintf(", see [%s](#%s)", titles[md.FullName()], anchor(titles[md.FullName()]))
				}
				kinds = append(kinds, k)
			}
			fmt.Fprintf(&b, "### %s\n\n", strings.Join(names, ", "))
			fmt.Fprintf(&b, "%s\n\n", strings.Join(kinds, "; "))
			if c := comments[string(group[0].FullName())]; c != "" {
				fmt.Fprintf(&b, "%s\n\n", text(c))
			}
		}
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// title names a section by where it sits and its message.
func title(s *section) string {
	if s.places[0] == "" {
		return "Top level (" + string(s.md.Name()) + ")"
	}
	return fmt.Sprintf("%s (%s)", s.places[0], s.md.Name())
}

// anchor returns the fragment GitHub gives a heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// kind describes the type of a field's value as written in YAML.
func kind(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "map of " + scalar(fd.MapKey()) + " to " + scalar(fd.MapValue())
	case fd.IsList():
		return "list of " + scalar(fd) + "s"
	default:
		return scalar(fd)
	}
}

// zero returns the zero value of fd as written in YAML.
func zero(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return `""`
	case protoreflect.BoolKind:
		return "false"
	default:
		return "0"
	}
}

// scalar names the type of one value of fd.
func scalar(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind:
		if fd.Message().FullName() == "google.protobuf.Duration" {
			return "duration (\"30s\", \"20m\", \"1h\")"
		}
		return string(fd.Message().Name())
	case protoreflect.StringKind:
		return "string"
	case protoreflect.BoolKind:
		return "bool"
	case protoreflect.DoubleKind, protoreflect.FloatKind:
		return "number"
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		return "whole number ≥ 0"
	default:
		return fd.Kind().String()
	}
}

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = "`" + v + "`"
	}
	return strings.Join(q, ", ")
}

// text escapes what Markdown would read otherwise in a comment: "*" (emphasis, as in "x-*") and
// "<" (a tag, as in "<uid>").
func text(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "<", `\<`).Replace(s)
}
