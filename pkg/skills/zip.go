package skills

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// cdSignature starts each entry of a zip's central directory.
var cdSignature = []byte("PK\x01\x02")

// maxPath bounds a path in a bundle, in bytes.
const maxPath = 1024

// ReadZip reads a skill bundle from the zip r, which it reads to its end or to the first
// limit passed: the zip's size while it arrives, its number of entries before they are parsed,
// each file's and the bundle's uncompressed bytes and each entry's inflation ratio while it
// inflates (never trusting the sizes the zip declares). An entry that is not a regular file or
// a directory (a symlink, a device), a path that is absolute or climbs with "..", and an
// encrypted entry are refused. A refused zip is an *InvalidError; an error reading r is
// returned wrapped.
func ReadZip(r io.Reader, lim Limits) (*Bundle, error) {
	lim = lim.withDefaults()
	data, err := io.ReadAll(io.LimitReader(r, lim.MaxZipBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read the zip: %w", err)
	}
	if int64(len(data)) > lim.MaxZipBytes {
		return nil, tooLarge("The skill zip is too large: at most %d bytes.", lim.MaxZipBytes)
	}
	return parseZip(data, lim)
}

func parseZip(data []byte, lim Limits) (*Bundle, error) {
	// Each entry archive/zip parses starts at a distinct central directory signature, so
	// counting them bounds what it allocates before it allocates it (a 50 MB zip could
	// otherwise declare a million entries). Directories count too, hence twice MaxFiles.
	maxEntries := 2 * lim.MaxFiles
	if bytes.Count(data, cdSignature) > maxEntries+1 {
		return nil, invalid("The skill zip has too many entries: at most %d files.", lim.MaxFiles)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, invalid("The skill bundle is not a valid zip file.")
	}
	if len(zr.File) > maxEntries {
		return nil, invalid("The skill zip has too many entries: at most %d files.", lim.MaxFiles)
	}
	var (
		files []File
		total int64
	)
	for _, f := range zr.File {
		name, dir, err := entryPath(f)
		if err != nil {
			return nil, err
		}
		if dir {
			continue
		}
		if len(files) == lim.MaxFiles {
			return nil, invalid("The skill bundle has too many files: at most %d.", lim.MaxFiles)
		}
		if f.UncompressedSize64 > uint64(lim.MaxFileBytes) {
			return nil, tooLarge("The file %q of the skill bundle is too large: at most %d bytes.", name, lim.MaxFileBytes)
		}
		content, err := inflate(f, name, lim, lim.MaxBundleBytes-total)
		if err != nil {
			return nil, err
		}
		total += int64(len(content))
		files = append(files, File{Path: name, Data: content, Exec: f.Mode()&0o111 != 0})
	}
	return newBundle(files)
}

// entryPath checks the entry f: its path, and that it is a regular file or a directory.
func entryPath(f *zip.File) (name string, dir bool, err error) {
	mode := f.Mode()
	if f.Flags&0x1 != 0 {
		return "", false, invalid("The entry %q of the skill zip is encrypted.", printable(f.Name))
	}
	if mode&fs.ModeSymlink != 0 {
		return "", false, invalid("The entry %q of the skill zip is a symbolic link; a skill bundle holds regular files only.", printable(f.Name))
	}
	if mode&(fs.ModeType&^fs.ModeDir) != 0 {
		return "", false, invalid("The entry %q of the skill zip is not a regular file.", printable(f.Name))
	}
	dir = mode.IsDir() || strings.HasSuffix(f.Name, "/")
	name, err = cleanPath(strings.TrimSuffix(f.Name, "/"))
	return name, dir, err
}

// inflate returns the content of f, refusing it as soon as it passes the file limit, room
// (what is left of the bundle's), or the inflation ratio.
func inflate(f *zip.File, name string, lim Limits, room int64) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, invalid("The entry %q of the skill zip cannot be read: %v.", name, errors.Unwrap(err))
	}
	defer rc.Close()
	limit := min(lim.MaxFileBytes, room)
	var buf bytes.Buffer
	chunk := make([]byte, 32<<10)
	for {
		n, err := rc.Read(chunk)
		buf.Write(chunk[:n])
		switch size := int64(buf.Len()); {
		case size > lim.MaxFileBytes:
			return nil, tooLarge("The file %q of the skill bundle is too large: at most %d bytes.", name, lim.MaxFileBytes)
		case size > limit:
			return nil, tooLarge("The skill bundle is too large: at most %d bytes uncompressed.", lim.MaxBundleBytes)
		case size > 1<<20 && size > lim.MaxRatio*max(int64(f.CompressedSize64), 1):
			return nil, invalid("The entry %q of the skill zip inflates more than %d times its size; zip bombs are refused.", name, lim.MaxRatio)
		}
		if err == io.EOF {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, invalid("The entry %q of the skill zip cannot be read: it is corrupt.", name)
		}
	}
}

// cleanPath checks a path of a bundle: relative, slash-separated, with no empty, "." or ".."
// element, no backslash, no control character, valid UTF-8, at most maxPath bytes.
func cleanPath(p string) (string, error) {
	switch {
	case p == "":
		return "", invalid("A path of the skill bundle is empty.")
	case len(p) > maxPath:
		return "", invalid("A path of the skill bundle is longer than %d bytes.", maxPath)
	case !utf8.ValidString(p):
		return "", invalid("A path of the skill bundle is not valid UTF-8.")
	case strings.HasPrefix(p, "/"), len(p) >= 2 && p[1] == ':':
		return "", invalid("The path %q of the skill bundle is absolute; paths must be relative to the bundle.", printable(p))
	case strings.ContainsRune(p, '\\'):
		return "", invalid("The path %q of the skill bundle has a backslash.", printable(p))
	case strings.ContainsFunc(p, unicode.IsControl):
		return "", invalid("The path %q of the skill bundle has a control character.", printable(p))
	}
	for _, el := range strings.Split(p, "/") {
		switch el {
		case "..":
			return "", invalid("The path %q of the skill bundle climbs out of it with '..'.", printable(p))
		case "", ".":
			return "", invalid("The path %q of the skill bundle is not clean.", printable(p))
		}
	}
	return p, nil
}

// printable quotes what a client sent for an error message, at most 200 bytes of it.
func printable(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	return strings.ToValidUTF8(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s), "?")
}

// newBundle makes a bundle of files (clean paths): the files of one top-level folder (which
// is stripped) or of none, with exactly one SKILL.md (or skill.md) at the top, whose front
// matter names and describes the skill. A path that is both a file and a folder, or repeated,
// is refused.
func newBundle(files []File) (*Bundle, error) {
	if len(files) == 0 {
		return nil, invalid("The skill bundle has no files; it needs a SKILL.md.")
	}
	if top, ok := commonTop(files); ok {
		for i := range files {
			files[i].Path = strings.TrimPrefix(files[i].Path, top+"/")
		}
	}
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		if seen[f.Path] {
			return nil, invalid("The path %q is repeated in the skill bundle.", f.Path)
		}
		seen[f.Path] = true
	}
	skillMD := -1
	for i, f := range files {
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			if seen[dir] {
				return nil, invalid("The path %q of the skill bundle is both a file and a folder.", dir)
			}
		}
		if f.Path == "SKILL.md" || f.Path == "skill.md" {
			if skillMD >= 0 {
				return nil, invalid("The skill bundle has both SKILL.md and skill.md; it needs exactly one.")
			}
			skillMD = i
		}
	}
	if skillMD < 0 {
		return nil, invalid("The skill bundle has no SKILL.md at its top: a bundle is one folder with a SKILL.md in it.")
	}
	name, desc, err := parseFrontMatter(files[skillMD].Data)
	if err != nil {
		return nil, err
	}
	return &Bundle{Name: name, Description: desc, Files: files}, nil
}

// commonTop returns the top-level folder every file is in, if there is one.
func commonTop(files []File) (string, bool) {
	top, _, ok := strings.Cut(files[0].Path, "/")
	if !ok {
		return "", false
	}
	for _, f := range files[1:] {
		if !strings.HasPrefix(f.Path, top+"/") {
			return "", false
		}
	}
	return top, true
}

// Builder makes a bundle of separately uploaded files (the Skills API's directory upload,
// each file named "<folder>/<path>"), checking the limits while each file is read. The zero
// value is not usable: start with NewBuilder. A Builder is not safe for concurrent use.
type Builder struct {
	lim   Limits
	files []File
	total int64
}

// NewBuilder returns a Builder with lim.
func NewBuilder(lim Limits) *Builder { return &Builder{lim: lim.withDefaults()} }

// Add reads the file name from r, to its end or to the first limit passed. A refused file is
// an *InvalidError; an error reading r is returned wrapped.
func (b *Builder) Add(name string, r io.Reader) error {
	p, err := cleanPath(strings.TrimPrefix(name, "./"))
	if err != nil {
		return err
	}
	if len(b.files) == b.lim.MaxFiles {
		return invalid("The skill bundle has too many files: at most %d.", b.lim.MaxFiles)
	}
	limit := min(b.lim.MaxFileBytes, b.lim.MaxZipBytes-b.total)
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return fmt.Errorf("read the file %q: %w", p, err)
	}
	switch size := int64(len(data)); {
	case size > b.lim.MaxFileBytes:
		return tooLarge("The file %q of the skill bundle is too large: at most %d bytes.", p, b.lim.MaxFileBytes)
	case size > limit:
		return tooLarge("The files of the skill bundle are too large: at most %d bytes together.", b.lim.MaxZipBytes)
	}
	b.total += int64(len(data))
	b.files = append(b.files, File{Path: p, Data: data, Exec: strings.HasSuffix(p, ".sh")})
	return nil
}

// Bundle returns the bundle of the files added.
func (b *Builder) Bundle() (*Bundle, error) { return newBundle(b.files) }

// Zip writes b as a zip of one top-level folder, dir.
func (b *Bundle) Zip(w io.Writer, dir string) error {
	zw := zip.NewWriter(w)
	for _, f := range b.Files {
		h := &zip.FileHeader{Name: dir + "/" + f.Path, Method: zip.Deflate}
		mode := fs.FileMode(0o644)
		if f.Exec {
			mode = 0o755
		}
		h.SetMode(mode)
		fw, err := zw.CreateHeader(h)
		if err != nil {
			return fmt.Errorf("zip %q: %w", f.Path, err)
		}
		if _, err := fw.Write(f.Data); err != nil {
			return fmt.Errorf("zip %q: %w", f.Path, err)
		}
	}
	return zw.Close()
}
