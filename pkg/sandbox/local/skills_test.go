package local

// Tests of a container's skills (skills.go): mounted read-only where the Spec says, out of the
// code's reach, in both start modes; a container without skills starts as before.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

func testSkills() *sandbox.SkillFiles {
	return &sandbox.SkillFiles{Root: "/home/oai/skills", Files: []sandbox.SkillFile{
		{Path: "csv-tool-0123456789abcdef0123456789abcdef/SKILL.md", Data: []byte("---\nname: csv-tool\ndescription: d\n---\nthe body\n")},
		{Path: "csv-tool-0123456789abcdef0123456789abcdef/scripts/run.py", Data: []byte("print('ran')\n")},
	}}
}

// skillAttack tries everything the code could do to a skill's files and prints what happened.
const skillAttack = `
import os, ctypes, errno
d = '/home/oai/skills/csv-tool-0123456789abcdef0123456789abcdef'
p = d + '/SKILL.md'
print('read', open(p).read().splitlines()[4])
def attempt(name, f):
    try:
        f()
        print(name, 'ok')
    except OSError as e:
        print(name, errno.errorcode[e.errno])
attempt('write', lambda: open(p, 'a').write('x'))
attempt('unlink', lambda: os.unlink(p))
attempt('rename', lambda: os.rename(p, d + '/x'))
attempt('chmod', lambda: os.chmod(p, 0o666))
attempt('create', lambda: open(d + '/new', 'w'))
attempt('rmtree', lambda: os.rmdir(d + '/scripts'))
libc = ctypes.CDLL(None, use_errno=True)
def mount(src, target, fstype, flags):
    if libc.mount(src, target, fstype, flags, None) != 0:
        raise OSError(ctypes.get_errno(), 'mount')
attempt('remount', lambda: mount(None, b'/home/oai/skills', None, 32))  # MS_REMOUNT
attempt('umount', lambda: (_ for _ in ()).throw(OSError(ctypes.get_errno(), 'umount')) if libc.umount2(b'/home/oai/skills', 2) != 0 else None)
attempt('overmount', lambda: mount(b'tmpfs', b'/home/oai/skills', b'tmpfs', 0))
print('mode', oct(os.stat(p).st_mode & 0o777), oct(os.stat(d).st_mode & 0o777))
print('after', open(p).read().splitlines()[4])
exec(open(d + '/scripts/run.py').read())
`

func TestSkillsMountedReadOnly(t *testing.T) {
	t.Parallel()
	for _, start := range []string{StartExec, StartFork} {
		t.Run(start, func(t *testing.T) {
			t.Parallel()
			l := newTestLocal(t, Config{Start: start})
			c := newTestContainer(t, l, sandbox.Spec{Skills: testSkills()})
			assert.False(t, forked(c), "a container with skills starts the exec way")
			res := runIn(t, c, skillAttack)
			require.Nil(t, res.Error, "the attack script ran: %s", res.Stderr)
			got := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
				k, v, _ := strings.Cut(line, " ")
				got[k] = v
			}
			assert.Equal(t, "the body", got["read"], "SKILL.md is readable")
			// A write is refused on the file's mode before the mount's.
			assert.Contains(t, []string{"EACCES", "EROFS"}, got["write"], "write to SKILL.md")
			for _, op := range []string{"unlink", "rename", "chmod", "create", "rmtree"} {
				assert.Equal(t, "EROFS", got[op], "%s on the read-only mount", op)
			}
			for _, op := range []string{"remount", "umount", "overmount"} {
				assert.Equal(t, "EPERM", got[op], "%s without a capability", op)
			}
			assert.Equal(t, "0o444 0o555", got["mode"], "files 0444, directories 0555")
			assert.Equal(t, "the body", got["after"], "SKILL.md unchanged")
			assert.Contains(t, res.Stdout, "ran\n", "a skill's script can be read and run")
		})
	}
}

// TestNoSkillsAsBefore: a container without skills is forked in the fork mode, and has neither
// a skills directory nor another mount than before.
func TestNoSkillsAsBefore(t *testing.T) {
	t.Parallel()
	for _, start := range []string{StartExec, StartFork} {
		t.Run(start, func(t *testing.T) {
			t.Parallel()
			l := newTestLocal(t, Config{Start: start})
			plain := newTestContainer(t, l, sandbox.Spec{})
			if start == StartFork && l.tpl != nil {
				assert.True(t, forked(plain), "a container without skills is forked")
			}
			const look = "import os\nprint(sorted(os.listdir('/')), os.path.exists('/home'), os.path.exists('/skills'))\n" +
				"print(len(open('/proc/self/mountinfo').read().splitlines()))"
			res := runIn(t, plain, look)
			assert.Contains(t, res.Stdout, "False False\n", "no /home, no /skills")
			with := newTestContainer(t, l, sandbox.Spec{Skills: &sandbox.SkillFiles{Root: "/skills",
				Files: []sandbox.SkillFile{{Path: "a/SKILL.md", Data: []byte("x")}}}})
			res2 := runIn(t, with, look)
			assert.Contains(t, res2.Stdout, "False True\n", "/skills, in the container with skills only")
			if start == StartExec { // the same start: one mount more, the skills'
				n1, err1 := strconv.Atoi(strings.Split(strings.TrimSpace(res.Stdout), "\n")[1])
				n2, err2 := strconv.Atoi(strings.Split(strings.TrimSpace(res2.Stdout), "\n")[1])
				require.NoError(t, errors.Join(err1, err2), "mount counts")
				assert.Equal(t, n1+1, n2, "one mount more: the skills' tmpfs")
			}
		})
	}
}

func TestSkillsRefused(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{Start: StartExec})
	for name, s := range map[string]*sandbox.SkillFiles{
		"relative root":  {Root: "skills", Files: []sandbox.SkillFile{{Path: "a/SKILL.md"}}},
		"system root":    {Root: "/usr/skills", Files: []sandbox.SkillFile{{Path: "a/SKILL.md"}}},
		"data root":      {Root: "/mnt/data/s", Files: []sandbox.SkillFile{{Path: "a/SKILL.md"}}},
		"traversal":      {Root: "/skills", Files: []sandbox.SkillFile{{Path: "../etc/passwd"}}},
		"absolute file":  {Root: "/skills", Files: []sandbox.SkillFile{{Path: "/etc/passwd"}}},
		"unclean":        {Root: "/skills", Files: []sandbox.SkillFile{{Path: "a/./b"}}},
		"twice":          {Root: "/skills", Files: []sandbox.SkillFile{{Path: "a/b"}, {Path: "a/b"}}},
		"file and dir":   {Root: "/skills", Files: []sandbox.SkillFile{{Path: "a"}, {Path: "a/b"}}},
		"no files":       {Root: "/skills"},
		"too many files": {Root: "/skills", Files: make([]sandbox.SkillFile, sandbox.MaxSkillFiles+1)},
		"too many bytes": {Root: "/skills", Files: []sandbox.SkillFile{{Path: "a/SKILL.md", Data: make([]byte, sandbox.MaxSkillBytes+1)}}},
	} {
		spec := sandbox.Spec{Skills: s}
		err := l.CheckSpec(spec)
		assert.ErrorIs(t, err, sandbox.ErrInvalidSpec, "%s: CheckSpec", name)
		var se *sandbox.SpecError
		if assert.True(t, errors.As(err, &se), "%s: a SpecError", name) {
			assert.Equal(t, "skills", se.Field, name)
		}
		_, err = l.Create(context.Background(), spec)
		assert.ErrorIs(t, err, sandbox.ErrInvalidSpec, "%s: Create", name)
	}
}

// TestSkillScriptExecutable: a skill file marked executable is mode 0555 in the container and
// runs as "./scripts/run.sh" from the skill's directory, as natively; a file not marked stays
// 0444 and is not run.
func TestSkillScriptExecutable(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t, Config{Start: StartExec})
	const dir = "tool-0123456789abcdef0123456789abcdef"
	c := newTestContainer(t, l, sandbox.Spec{Skills: &sandbox.SkillFiles{Root: "/home/oai/skills", Files: []sandbox.SkillFile{
		{Path: dir + "/SKILL.md", Data: []byte("---\nname: tool\ndescription: d\n---\n")},
		{Path: dir + "/scripts/run.sh", Data: []byte("#!/bin/sh\necho \"ran $1\"\n"), Exec: true},
		{Path: dir + "/scripts/plain.sh", Data: []byte("#!/bin/sh\necho plain\n")},
	}}})
	res := runIn(t, c, `
import os, subprocess
d = '/home/oai/skills/`+dir+`'
for f in ('scripts/run.sh', 'scripts/plain.sh', 'SKILL.md'):
    print(f, oct(os.stat(d + '/' + f).st_mode & 0o777))
print(subprocess.run(['./scripts/run.sh', 'here'], cwd=d, capture_output=True, text=True).stdout.strip())
try:
    subprocess.run(['./scripts/plain.sh'], cwd=d)
    print('plain ran')
except PermissionError:
    print('plain EACCES')
`)
	require.Nil(t, res.Error, "the script ran: %s", res.Stderr)
	assert.Contains(t, res.Stdout, "scripts/run.sh 0o555\n", "an executable file is 0555")
	assert.Contains(t, res.Stdout, "scripts/plain.sh 0o444\n", "a file not marked executable is 0444")
	assert.Contains(t, res.Stdout, "SKILL.md 0o444\n", "SKILL.md is 0444")
	assert.Contains(t, res.Stdout, "ran here\n", "./scripts/run.sh runs")
	assert.Contains(t, res.Stdout, "plain EACCES\n", "a file not marked executable does not run")
}
