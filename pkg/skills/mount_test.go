package skills

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMountFilesKeepExec: a file whose zip entry is executable (its unix mode in the entry's
// external attributes) is executable among the container's files; the others are not.
func TestMountFilesKeepExec(t *testing.T) {
	z := makeZip(t,
		entry{name: "csv-insights/SKILL.md", data: skillMD, mode: 0o644},
		entry{name: "csv-insights/scripts/run.sh", data: "#!/bin/sh\necho hi\n", mode: 0o755},
		entry{name: "csv-insights/scripts/lib.py", data: "x = 1\n", mode: 0o644},
	)
	ms, err := Resolve(t.Context(), nil, Limits{}, "alice", []Ref{{Zip: z, Param: "skills[0]"}}, false)
	require.NoError(t, err, "Resolve of an inline zip")
	files := MountFiles("/home/oai/skills", ms)
	require.NotNil(t, files, "the files mounted")
	got := map[string]bool{}
	for _, f := range files.Files {
		got[f.Path] = f.Exec
	}
	assert.Equal(t, map[string]bool{
		"csv-insights/SKILL.md":       false,
		"csv-insights/scripts/run.sh": true,
		"csv-insights/scripts/lib.py": false,
	}, got, "each file's exec bit, as its zip entry's mode says")
}
