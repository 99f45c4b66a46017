// Package skills keeps OpenAI-style skills: versioned bundles of files with a SKILL.md whose
// front matter names and describes the skill, as the Skills API (/v1/skills) creates them and
// containers mount them.
//
// A bundle arrives as a zip or as separate files; ReadZip and FromFiles check it against the
// native limits (a zip of at most 50 MB, at most 500 files, at most 25 MB per file) while they
// read it, refuse what could escape the bundle's directory (absolute paths, "..", symlinks,
// devices) and what would inflate past its bounds (a zip bomb), and parse SKILL.md's front
// matter. A [Store] keeps the checked bundles per identity; [Memory] is the single process's.
package skills

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Native limits of a bundle (OpenAI's Skills API).
const (
	// MaxZipBytes bounds an uploaded zip (and the files of a directory upload together).
	MaxZipBytes = 50 << 20
	// MaxFiles bounds the files of a bundle.
	MaxFiles = 500
	// MaxFileBytes bounds one file, uncompressed.
	MaxFileBytes = 25 << 20
)

// Limits bounds what ReadZip and FromFiles take. The zero value of each field means its
// default.
type Limits struct {
	// MaxZipBytes bounds the zip (or the uploaded files together); zero means MaxZipBytes.
	MaxZipBytes int64
	// MaxFiles bounds the files; zero means MaxFiles.
	MaxFiles int
	// MaxFileBytes bounds one uncompressed file; zero means MaxFileBytes.
	MaxFileBytes int64
	// MaxBundleBytes bounds the uncompressed files together (ours: the native API states no
	// such bound, but 500 files of 25 MB each would be 12.5 GB); zero means 100 MiB.
	MaxBundleBytes int64
	// MaxRatio bounds how many times its compressed size an entry of a zip inflates to, once
	// it is past 1 MiB; zero means 200. A zip bomb is refused as soon as an entry passes it.
	MaxRatio int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxZipBytes <= 0 {
		l.MaxZipBytes = MaxZipBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = MaxFiles
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = MaxFileBytes
	}
	if l.MaxBundleBytes <= 0 {
		l.MaxBundleBytes = 100 << 20
	}
	if l.MaxRatio <= 0 {
		l.MaxRatio = 200
	}
	return l
}

// File is one file of a bundle.
type File struct {
	// Path is its path under the skill's directory, slash-separated, clean and relative
	// ("SKILL.md", "scripts/run.py").
	Path string
	// Data is its content.
	Data []byte
	// Exec reports whether it is executable.
	Exec bool
}

// Bundle is a checked skill bundle: its files and what SKILL.md's front matter says.
type Bundle struct {
	// Name and Description are SKILL.md's front matter's.
	Name, Description string
	// Files are the bundle's files, SKILL.md among them, in the order they came.
	Files []File
	// DisplayName is the label the skill is created with (Anthropic's display_name, checked
	// by CheckDisplayName), kept beside the skill by Store.Create (Skill.DisplayName); ""
	// for none. A version added to a skill does not change it, and a bundle read back from a
	// store has none.
	DisplayName string
}

// Size is the bundle's bytes, uncompressed.
func (b *Bundle) Size() int64 {
	var n int64
	for _, f := range b.Files {
		n += int64(len(f.Data))
	}
	return n
}

// Skill is a skill as the API shows it.
type Skill struct {
	// ID is "skill_…".
	ID string
	// Name and Description are its default version's.
	Name, Description string
	// CreatedAt is when it was created.
	CreatedAt time.Time
	// DefaultVersion and LatestVersion are version numbers ("1", "2", …).
	DefaultVersion, LatestVersion string
	// DisplayName is the label it was created with (Bundle.DisplayName), "" when none was.
	DisplayName string
}

// Version is one version of a skill.
type Version struct {
	// ID is "skillver_…"; SkillID the skill's.
	ID, SkillID string
	// Version is its number, "1" for the first.
	Version string
	// Epoch is its id in Anthropic's shape, as Anthropic mints them: the microseconds since
	// the Unix epoch when it was made ("1759178010641129"), each later than the skill's
	// version made before it (see NextEpoch), so unique within the skill. A store's version
	// argument may name it so.
	Epoch string
	// Name and Description are its SKILL.md's.
	Name, Description string
	// CreatedAt is when it was created.
	CreatedAt time.Time
}

// Store keeps skills per identity (never empty); a skill of another identity is ErrNotFound.
// A version argument is a number, a version's Epoch, "latest", or "" for the default version.
// Implementations are safe for concurrent use.
type Store interface {
	// Create makes a skill of b, its version 1 (the default), with b's DisplayName.
	Create(ctx context.Context, identity string, b *Bundle) (Skill, error)
	// List returns identity's skills, in any order.
	List(ctx context.Context, identity string) ([]Skill, error)
	// Get returns one skill.
	Get(ctx context.Context, identity, id string) (Skill, error)
	// SetDefault makes version the skill's default.
	SetDefault(ctx context.Context, identity, id, version string) (Skill, error)
	// Delete deletes a skill and its versions.
	Delete(ctx context.Context, identity, id string) error
	// AddVersion adds a version of b to the skill, its default when makeDefault.
	AddVersion(ctx context.Context, identity, id string, b *Bundle, makeDefault bool) (Version, error)
	// Versions returns the skill's versions, in any order.
	Versions(ctx context.Context, identity, id string) ([]Version, error)
	// Version returns one version of the skill.
	Version(ctx context.Context, identity, id, version string) (Version, error)
	// DeleteVersion deletes one version; the default version cannot be deleted while others
	// remain (ErrDefaultVersion), and deleting the last version deletes the skill.
	DeleteVersion(ctx context.Context, identity, id, version string) error
	// Bundle returns a version's bundle, which the caller must not modify.
	Bundle(ctx context.Context, identity, id, version string) (*Bundle, Version, error)
	// Attach records that identity's container containerID was created with the skills as,
	// so that a request naming the container (a shell tool's container_reference) tells the
	// model of them; a second Attach of the container replaces the first. What is recorded
	// is bounded by the implementation, and may be forgotten (oldest first, or when the
	// container is long idle).
	Attach(ctx context.Context, identity, containerID string, as []Announced) error
	// Attached returns what Attach recorded of identity's container containerID; none (and
	// a nil error) when nothing was.
	Attached(ctx context.Context, identity, containerID string) ([]Announced, error)
}

// Announced is a skill in a container as the model is told of it.
type Announced struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Path is its SKILL.md's in the container.
	Path string `json:"path"`
}

// Errors a Store returns for the API to map.
var (
	// ErrNotFound: no such skill or version for this identity.
	ErrNotFound = errors.New("skill not found")
	// ErrFull: the identity (or the server) may not keep another skill, version or byte.
	ErrFull = errors.New("no room for more skills")
	// ErrDefaultVersion: the version is the skill's default, which is not deleted while
	// others remain.
	ErrDefaultVersion = errors.New("the default version cannot be deleted")
)

// InvalidError is a bundle or a value the client sent that is refused; it becomes a 400
// naming Param, or a 413 when TooLarge.
type InvalidError struct {
	// Param is the request field ("files"), Message the explanation the client reads.
	Param, Message string
	// TooLarge reports whether a size limit was passed.
	TooLarge bool
}

func (e *InvalidError) Error() string { return e.Param + ": " + e.Message }

func invalid(format string, args ...any) *InvalidError {
	return &InvalidError{Param: "files", Message: fmt.Sprintf(format, args...)}
}

func tooLarge(format string, args ...any) *InvalidError {
	return &InvalidError{Param: "files", Message: fmt.Sprintf(format, args...), TooLarge: true}
}

// VersionNumber returns the number of the version named name: "" is def (the default
// version's), "latest" is latest, any other name the number it spells; one that spells no
// number is ErrNotFound. Whether that version exists is the caller's to check.
func VersionNumber(name string, def, latest int) (int, error) {
	switch name {
	case "":
		return def, nil
	case "latest":
		return latest, nil
	}
	n, err := strconv.Atoi(name)
	if err != nil {
		return 0, ErrNotFound
	}
	return n, nil
}

// NextEpoch returns the Epoch of a version made at now after one whose Epoch was last (0 for
// none): now in microseconds since the Unix epoch, or last+1 when that is not later.
func NextEpoch(now time.Time, last int64) int64 { return max(now.UnixMicro(), last+1) }

// MaxDisplayName bounds a skill's display_name, in characters (Anthropic's bound).
const MaxDisplayName = 255

// CheckDisplayName returns name as a skill keeps it (surrounding spaces trimmed; "" for none)
// or an *InvalidError: Anthropic's display_name is one line of at most MaxDisplayName
// characters.
func CheckDisplayName(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch {
	case !utf8.ValidString(name):
		return "", &InvalidError{Param: "display_name", Message: "must be valid UTF-8"}
	case utf8.RuneCountInString(name) > MaxDisplayName:
		return "", &InvalidError{Param: "display_name", Message: fmt.Sprintf("must be at most %d characters", MaxDisplayName)}
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return "", &InvalidError{Param: "display_name", Message: "must be a single line, without control characters"}
	}
	return name, nil
}

// EpochMatch reports whether the version name names a version whose Epoch is epoch.
func EpochMatch(name, epoch string) bool { return name != "" && name == epoch }
