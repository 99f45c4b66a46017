package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

// hibernating is the acquire request of a new hibernating container of alice's.
var hibernating = sandbox.AcquireRequest{Identity: "alice", Hibernate: true, IDPrefix: "container_"}

// hibernatedDirs returns the names in the hibernation directory dir.
func hibernatedDirs(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	require.NoError(t, err, "read %s", dir)
	var out []string
	for _, de := range des {
		if de.Name() != ".lock" {
			out = append(out, de.Name())
		}
	}
	return out
}

// TestHibernateRestore: a hibernating container idle past its expiry is hibernated (its
// process ended, its files on disk in a 0700 directory), and restored by its id: the same id,
// the same files with the same ids, fresh variables, and the model told once.
func TestHibernateRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "hib")
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute,
			Hibernation: sandbox.HibernationConfig{Dir: dir}})
		l := acquire(t, m, hibernating)
		id := l.ContainerID()
		assert.True(t, strings.HasPrefix(id, "container_"), "id %q has the asked prefix", id)
		res := run(t, l, "write /mnt/data/out/a.txt hello")
		require.Len(t, res.Files, 1, "the run's files")
		fileID := res.Files[0].ID
		run(t, l, "x=1")
		l.Release()

		time.Sleep(4 * time.Minute)
		synctest.Wait()
		assert.False(t, p.Container(0).Deleted(), "idle less than its expiry: running")

		time.Sleep(2 * time.Minute)
		synctest.Wait()
		assert.True(t, p.Container(0).Deleted(), "idle past its expiry: its process ended")
		n, bytes := m.Hibernated()
		assert.Equal(t, 1, n, "hibernated containers")
		assert.Equal(t, int64(len("hello")), bytes, "hibernated bytes")
		assert.Equal(t, []string{id}, hibernatedDirs(t, dir), "one directory, named by the id")
		fi, err := os.Stat(filepath.Join(dir, id))
		require.NoError(t, err, "stat the container's directory")
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the container's directory's mode")
		assert.True(t, m.Known("alice", id), "a hibernated container is known")
		assert.False(t, m.Known("bob", id), "to its identity only")
		info, err := m.Container(context.Background(), "alice", id)
		require.NoError(t, err, "Container of a hibernated container")
		assert.Equal(t, sandbox.StatusRunning, info.Status, "a hibernated container is shown running")
		_, err = m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "bob", ContainerID: id})
		assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "another identity cannot restore it")

		l = acquire(t, m, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
		assert.Equal(t, id, l.ContainerID(), "restored under its id")
		res = run(t, l, "x")
		assert.Empty(t, res.Value, "variables did not survive")
		assert.Contains(t, res.FilesNote, sandbox.RestoredNote, "the first run tells the model")
		text, ok := p.Container(1).FileText("/mnt/data/out/a.txt")
		assert.True(t, ok, "the file is back")
		assert.Equal(t, "hello", text, "the file's bytes")
		files, err := m.Files(context.Background(), "alice", id)
		require.NoError(t, err, "Files of the restored container")
		require.Len(t, files, 1, "its files")
		assert.Equal(t, fileID, files[0].ID, "the file keeps its id")
		assert.Equal(t, sandbox.SourceAssistant, files[0].Source, "and its source")
		res = run(t, l, "x=2")
		assert.Empty(t, res.FilesNote, "told once")
		assert.Empty(t, res.Files, "the file put back is not the run's")
		l.Release()
		synctest.Wait()
		n, _ = m.Hibernated()
		assert.Equal(t, 0, n, "restored: no longer hibernated")
		assert.Empty(t, hibernatedDirs(t, dir), "its directory is gone once its files are back")

		// It hibernates again, with its file.
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		n, _ = m.Hibernated()
		assert.Equal(t, 1, n, "hibernated again")
	})
}

// TestHibernateLifetimeAndDelete: a hibernated container is forgotten, its files removed, at
// the end of its lifetime or when deleted: its id is then unknown, not expired.
func TestHibernateLifetimeAndDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "hib")
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute,
			Hibernation: sandbox.HibernationConfig{Dir: dir, Lifetime: time.Hour}})
		old := acquire(t, m, hibernating)
		run(t, old, "write /mnt/data/a hello")
		old.Release()
		time.Sleep(40 * time.Minute)
		deleted := acquire(t, m, hibernating)
		run(t, deleted, "write /mnt/data/b hello")
		deleted.Release()
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		n, _ := m.Hibernated()
		require.Equal(t, 2, n, "both hibernated")

		require.NoError(t, m.DeleteContainer(context.Background(), "alice", deleted.ContainerID()), "delete a hibernated container")
		synctest.Wait()
		assert.Equal(t, []string{old.ContainerID()}, hibernatedDirs(t, dir), "the deleted one's files are gone")
		_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", ContainerID: deleted.ContainerID()})
		assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "a deleted hibernated container is unknown")

		time.Sleep(15 * time.Minute) // past an hour since old's creation
		synctest.Wait()
		assert.Empty(t, hibernatedDirs(t, dir), "past its lifetime: its files are gone")
		assert.False(t, m.Known("alice", old.ContainerID()), "past its lifetime: unknown")
		_, err = m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", ContainerID: old.ContainerID()})
		assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "past its lifetime: unknown, not expired")
		assert.Equal(t, 2, p.Created(), "nothing was restored")
	})
}

// TestHibernateBounds: at a bound a container is not hibernated (the ones hibernated before
// keep theirs): it is deleted and forgotten.
func TestHibernateBounds(t *testing.T) {
	tests := []struct {
		name string
		give sandbox.HibernationConfig
	}{
		{name: "count per identity", give: sandbox.HibernationConfig{MaxPerIdentity: 1}},
		{name: "count in all", give: sandbox.HibernationConfig{MaxContainers: 1}},
		{name: "bytes per identity", give: sandbox.HibernationConfig{MaxBytesPerIdentity: 8}},
		{name: "bytes in all", give: sandbox.HibernationConfig{MaxBytes: 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tt.give.Dir = filepath.Join(t.TempDir(), "hib")
				p := &sandboxtest.Provider{}
				m := newTestManager(t, p, sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute, Hibernation: tt.give})
				first := acquire(t, m, hibernating)
				run(t, first, "write /mnt/data/a 12345")
				first.Release()
				time.Sleep(6 * time.Minute)
				synctest.Wait()
				second := acquire(t, m, hibernating)
				run(t, second, "write /mnt/data/b 12345")
				second.Release()
				time.Sleep(6 * time.Minute)
				synctest.Wait()

				n, bytes := m.Hibernated()
				assert.Equal(t, 1, n, "%s: hibernated containers", tt.name)
				assert.Equal(t, int64(5), bytes, "%s: hibernated bytes", tt.name)
				assert.Equal(t, []string{first.ContainerID()}, hibernatedDirs(t, dir(tt.give)), "%s: the first kept", tt.name)
				assert.True(t, p.Container(1).Deleted(), "%s: the second's process ended", tt.name)
				assert.True(t, m.Known("alice", first.ContainerID()), "%s: the first is known", tt.name)
				_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", ContainerID: second.ContainerID()})
				assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "%s: the second is unknown", tt.name)
			})
		})
	}
}

func dir(c sandbox.HibernationConfig) string { return c.Dir }

// TestHibernateOnlyWhenAsked: a container acquired without Hibernate keeps OpenAI's semantics
// (a "cntr_" id, expired after its idle time), also with hibernation configured; without a
// directory a hibernating container expires too.
func TestHibernateOnlyWhenAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hdir := filepath.Join(t.TempDir(), "hib")
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute,
			Hibernation: sandbox.HibernationConfig{Dir: hdir}})
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		assert.True(t, strings.HasPrefix(l.ContainerID(), "cntr_"), "id %q", l.ContainerID())
		run(t, l, "write /mnt/data/a hello")
		l.Release()
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		n, _ := m.Hibernated()
		assert.Equal(t, 0, n, "not hibernated")
		_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", ContainerID: l.ContainerID()})
		assert.ErrorIs(t, err, sandbox.ErrExpiredContainer, "an OpenAI container expires")

		off := newTestManager(t, &sandboxtest.Provider{}, sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute})
		l = acquire(t, off, hibernating)
		assert.True(t, strings.HasPrefix(l.ContainerID(), "container_"), "id %q", l.ContainerID())
		l.Release()
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		_, err = off.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", ContainerID: l.ContainerID()})
		assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "without hibernation: gone and forgotten")
	})
}

// TestHibernateAcrossRestart: a container hibernated by one Manager is restored by the next one
// on the same node (the same Registry and directory); what a Manager finds in the directory that
// the Registry does not name is removed.
func TestHibernateAcrossRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hdir := filepath.Join(t.TempDir(), "hib")
		reg := memory.NewRegistry()
		cfg := sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute, Registry: reg, Hibernation: sandbox.HibernationConfig{Dir: hdir}}
		p := &sandboxtest.Provider{}
		m1 := sandbox.NewManager(p, cfg, zaptest.NewLogger(t))
		l := acquire(t, m1, hibernating)
		id := l.ContainerID()
		run(t, l, "write /mnt/data/a hello")
		l.Release()
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		require.NoError(t, m1.Close(context.Background()), "close the first Manager")
		require.NoError(t, os.Mkdir(filepath.Join(hdir, "container_stray"), 0o700), "a stray directory")
		require.NoError(t, os.Mkdir(filepath.Join(hdir, ".tmp-123"), 0o700), "an unfinished hibernation")

		m2 := newTestManager(t, p, cfg)
		assert.Equal(t, []string{id}, hibernatedDirs(t, hdir), "only what the Registry names is kept")
		l = acquire(t, m2, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
		res := run(t, l, "x")
		assert.Contains(t, res.FilesNote, sandbox.RestoredNote, "restored after a restart")
		text, _ := p.Container(1).FileText("/mnt/data/a")
		assert.Equal(t, "hello", text, "with its file")
		l.Release()
	})
}

// TestHibernateRefusesAnUnsafeDirectory: a directory others may reach turns hibernation off:
// a hibernating container idles out, gone and forgotten.
func TestHibernateRefusesAnUnsafeDirectory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hdir := filepath.Join(t.TempDir(), "hib")
		require.NoError(t, os.Mkdir(hdir, 0o755), "mkdir")
		m := newTestManager(t, &sandboxtest.Provider{}, sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute,
			Hibernation: sandbox.HibernationConfig{Dir: hdir}})
		l := acquire(t, m, hibernating)
		run(t, l, "write /mnt/data/a hello")
		l.Release()
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		n, _ := m.Hibernated()
		assert.Equal(t, 0, n, "hibernation off")
		assert.Empty(t, hibernatedDirs(t, hdir), "nothing written there")
		_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", ContainerID: l.ContainerID()})
		assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "gone and forgotten")
	})
}

// TestHibernateDirectoryOfOneServer: a second Manager given a directory a live one uses does not
// hibernate there (nor remove what the first keeps); once the first is closed, it may.
func TestHibernateDirectoryOfOneServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hdir := filepath.Join(t.TempDir(), "hib")
		cfg := sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute, Hibernation: sandbox.HibernationConfig{Dir: hdir}}
		p := &sandboxtest.Provider{}
		first := sandbox.NewManager(p, cfg, zaptest.NewLogger(t))
		l := acquire(t, first, hibernating)
		run(t, l, "write /mnt/data/a hello")
		l.Release()
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		require.Equal(t, []string{l.ContainerID()}, hibernatedDirs(t, hdir), "the first's container hibernated")

		second := newTestManager(t, p, cfg)
		assert.Equal(t, []string{l.ContainerID()}, hibernatedDirs(t, hdir), "the second removes nothing")
		l2 := acquire(t, second, hibernating)
		l2.Release()
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		n, _ := second.Hibernated()
		assert.Equal(t, 0, n, "the second hibernates nothing")
		require.NoError(t, first.Close(context.Background()), "close the first")

		third := newTestManager(t, p, sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute, Hibernation: sandbox.HibernationConfig{Dir: hdir}})
		l3 := acquire(t, third, hibernating)
		l3.Release()
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		n, _ = third.Hibernated()
		assert.Equal(t, 1, n, "once the first is closed, the directory is free")
	})
}

// TestHibernatePrivateDirectories: Managers told to keep a directory of their own
// (HibernationConfig.Private, what a server configured with no hibernation.dir gets), inside
// one parent or the system's temporary directory, each hibernate in their own, and each
// removes its own when closed, while the other's stays.
func TestHibernatePrivateDirectories(t *testing.T) {
	tests := []struct {
		name string
		// give is the parent named as Dir; "" for the system's temporary directory.
		give string
	}{
		{"inside a directory given", "given"},
		{"inside the system's temporary directory", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp) // the system's temporary directory, for os.TempDir
			parent := tmp
			if tt.give != "" {
				parent = filepath.Join(tmp, tt.give)
			}
			dir := parent
			if tt.give == "" {
				dir = ""
			}
			synctest.Test(t, func(t *testing.T) {
				cfg := sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute, Hibernation: sandbox.HibernationConfig{Dir: dir, Private: true}}
				p := &sandboxtest.Provider{}
				ms := []*sandbox.Manager{sandbox.NewManager(p, cfg, zaptest.NewLogger(t)), sandbox.NewManager(p, cfg, zaptest.NewLogger(t))}
				for _, m := range ms {
					l := acquire(t, m, hibernating)
					run(t, l, "write /mnt/data/a hello")
					l.Release()
				}
				time.Sleep(6 * time.Minute)
				synctest.Wait()
				for i, m := range ms {
					n, _ := m.Hibernated()
					assert.Equal(t, 1, n, "manager %d hibernates in a directory of its own", i)
				}
				own, err := filepath.Glob(filepath.Join(parent, "codeinterp-hibernation-*"))
				require.NoError(t, err)
				require.Len(t, own, 2, "a directory each, in %s", parent)
				for _, d := range own {
					fi, err := os.Stat(d)
					require.NoError(t, err, "stat %s", d)
					assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "%s's mode", d)
					assert.Len(t, hibernatedDirs(t, d), 1, "%s holds one container", d)
				}

				require.NoError(t, ms[0].Close(context.Background()), "close the first")
				left, err := filepath.Glob(filepath.Join(parent, "codeinterp-hibernation-*"))
				require.NoError(t, err)
				assert.Len(t, left, 1, "the first's directory is removed, the second's kept")
				require.NoError(t, ms[1].Close(context.Background()), "close the second")
				left, err = filepath.Glob(filepath.Join(parent, "codeinterp-hibernation-*"))
				require.NoError(t, err)
				assert.Empty(t, left, "both removed")
			})
		})
	}
}

// TestHibernatePrivateStale: a Manager making its private hibernation directory removes those
// servers left there when they ended without Close (no one holds their lock, made over a minute
// ago), and leaves a live server's, one just made, and any other.
func TestHibernatePrivateStale(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "hib") // a Dir given is checked: mode 0700
	require.NoError(t, os.Mkdir(parent, 0o700))
	old := time.Now().Add(-time.Hour)
	mk := func(name string, lock bool) string {
		d := filepath.Join(parent, name)
		require.NoError(t, os.MkdirAll(filepath.Join(d, "container_1"), 0o700), "make %s", d)
		require.NoError(t, os.WriteFile(filepath.Join(d, "container_1", "manifest.json"), []byte("{}"), 0o600))
		if lock {
			require.NoError(t, os.WriteFile(filepath.Join(d, ".lock"), nil, 0o600))
		}
		return d
	}
	stale := mk("codeinterp-hibernation-1", true)
	fresh := mk("codeinterp-hibernation-2", true)
	unlocked := mk("codeinterp-hibernation-3", false)
	other := mk("other-1", true)
	cfg := sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute, Hibernation: sandbox.HibernationConfig{Dir: parent, Private: true}}
	live := newTestManager(t, &sandboxtest.Provider{}, cfg)
	held, err := filepath.Glob(filepath.Join(parent, "codeinterp-hibernation-*"))
	require.NoError(t, err)
	held = slices.DeleteFunc(held, func(d string) bool { return d == stale || d == fresh || d == unlocked })
	require.Len(t, held, 1, "the live Manager's own")
	for _, d := range []string{stale, unlocked, other, held[0]} {
		require.NoError(t, os.Chtimes(d, old, old), "age %s", d)
	}

	newTestManager(t, &sandboxtest.Provider{}, cfg)
	for _, d := range []string{fresh, unlocked, other, held[0]} {
		assert.DirExists(t, d, "kept")
	}
	assert.NoDirExists(t, stale, "left by a server that ended without Close: removed")
	n, _ := live.Hibernated()
	assert.Zero(t, n)
}

// TestHibernatePastLifetimeWhileLive: a live container idle past its expiry and past its
// lifetime is not hibernated: it is deleted and forgotten.
func TestHibernatePastLifetimeWhileLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hdir := filepath.Join(t.TempDir(), "hib")
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute,
			Hibernation: sandbox.HibernationConfig{Dir: hdir, Lifetime: 10 * time.Minute}})
		l := acquire(t, m, hibernating)
		run(t, l, "write /mnt/data/a hello")
		time.Sleep(8 * time.Minute) // in use: neither hibernated nor gone
		synctest.Wait()
		assert.False(t, p.Container(0).Deleted(), "in use: running")
		l.Release()
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		assert.True(t, p.Container(0).Deleted(), "idle past its expiry and lifetime: deleted")
		n, _ := m.Hibernated()
		assert.Zero(t, n, "not hibernated")
		assert.Empty(t, hibernatedDirs(t, hdir), "nothing on disk")
		_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{Identity: "alice", ContainerID: l.ContainerID()})
		assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "forgotten")
	})
}

// TestHibernateRestoredNeverRun: a container restored by a request that ran nothing hibernates
// again with its files as they were.
func TestHibernateRestoredNeverRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hdir := filepath.Join(t.TempDir(), "hib")
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute,
			Hibernation: sandbox.HibernationConfig{Dir: hdir}})
		l := acquire(t, m, hibernating)
		id := l.ContainerID()
		run(t, l, "write /mnt/data/a hello")
		l.Release()
		time.Sleep(6 * time.Minute)
		synctest.Wait()

		acquire(t, m, sandbox.AcquireRequest{Identity: "alice", ContainerID: id}).Release() // restored, nothing run
		n, _ := m.Hibernated()
		assert.Zero(t, n, "restored")
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		n, bytes := m.Hibernated()
		assert.Equal(t, 1, n, "hibernated again")
		assert.Equal(t, int64(5), bytes, "with its file's bytes")
		assert.Equal(t, 1, p.Created(), "no container was started for it")

		l = acquire(t, m, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
		run(t, l, "x")
		text, _ := p.Container(1).FileText("/mnt/data/a")
		assert.Equal(t, "hello", text, "the file survived both")
		l.Release()
	})
}

// TestHibernateKeepsSkills: a hibernated container's skills are kept on disk with its files
// (counted in its bytes), and its restored container mounts them again, also after a restart.
func TestHibernateKeepsSkills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hdir := filepath.Join(t.TempDir(), "hib")
		reg := memory.NewRegistry()
		cfg := sandbox.ManagerConfig{SessionIdleTTL: 5 * time.Minute, Registry: reg, Hibernation: sandbox.HibernationConfig{Dir: hdir}}
		p := &sandboxtest.Provider{}
		skills := &sandbox.SkillFiles{Root: "/skills", Files: []sandbox.SkillFile{
			{Path: "say/SKILL.md", Data: []byte("---\nname: say\n---\n")},
			{Path: "say/scripts/say.sh", Data: []byte("echo hi\n"), Exec: true},
		}}
		m1 := sandbox.NewManager(p, cfg, zaptest.NewLogger(t))
		req := hibernating
		req.Spec.Skills = skills
		l := acquire(t, m1, req)
		id := l.ContainerID()
		run(t, l, "x=1")
		l.Release()
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		n, bytes := m1.Hibernated()
		require.Equal(t, 1, n, "hibernated containers")
		assert.Equal(t, skills.Bytes(), bytes, "the skills' bytes are kept")

		l = acquire(t, m1, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
		run(t, l, "x")
		l.Release()
		specs := p.Specs()
		require.Len(t, specs, 2, "created, then restored")
		assert.Equal(t, skills, specs[1].Skills, "the restored container mounts the skills")

		time.Sleep(6 * time.Minute)
		synctest.Wait()
		require.NoError(t, m1.Close(context.Background()), "close the first Manager")
		m2 := newTestManager(t, p, cfg)
		l = acquire(t, m2, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
		run(t, l, "x")
		l.Release()
		specs = p.Specs()
		require.Len(t, specs, 3, "restored again after a restart")
		assert.Equal(t, skills, specs[2].Skills, "with its skills")
	})
}
