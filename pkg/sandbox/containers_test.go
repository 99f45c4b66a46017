package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
)

func create(t *testing.T, m *sandbox.Manager, r sandbox.CreateRequest) sandbox.ContainerInfo {
	t.Helper()
	info, err := m.Create(context.Background(), r)
	require.NoError(t, err, "create %+v", r)
	return info
}

func info(t *testing.T, m *sandbox.Manager, identity, id string) sandbox.ContainerInfo {
	t.Helper()
	got, err := m.Container(context.Background(), identity, id)
	require.NoError(t, err, "Container(%q, %q)", identity, id)
	return got
}

func putFile(t *testing.T, m *sandbox.Manager, identity, id, path, text string) sandbox.FileInfo {
	t.Helper()
	fi, err := m.PutFile(context.Background(), identity, id, path, sandbox.SourceUser, strings.NewReader(text), 0)
	require.NoError(t, err, "PutFile %s", path)
	return fi
}

func readFile(t *testing.T, m *sandbox.Manager, identity, id, fileID string) string {
	t.Helper()
	rc, _, err := m.OpenFile(context.Background(), identity, id, fileID)
	require.NoError(t, err, "OpenFile %s", fileID)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err, "read %s", fileID)
	return string(b)
}

// TestManagerKeptContainer: a caller with an identity keeps the container the loop made for
// it, reusable by its id; the anonymous caller's is deleted after the reply.
func TestManagerKeptContainer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		run(t, l, "x=1")
		id := l.ContainerID()
		l.Release()
		synctest.Wait()
		assert.False(t, p.Container(0).Deleted(), "kept after the release")
		again := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", ContainerID: id})
		assert.Equal(t, "1", run(t, again, "x").Value, "its state survives between requests")
		again.Release()
		got := info(t, m, "alice", id)
		assert.Equal(t, sandbox.ContainerInfo{ID: id, CreatedAt: time.Now(), LastActiveAt: time.Now(),
			ExpiresAfter: sandbox.DefaultSessionIdleTTL, MemoryLimit: "1g", Status: sandbox.StatusRunning}, got, "its info")

		anon := acquire(t, m, sandbox.AcquireRequest{})
		run(t, anon, "x=1")
		anonID := anon.ContainerID()
		anon.Release()
		synctest.Wait()
		assert.True(t, p.Container(1).Deleted(), "the anonymous caller's container is deleted after the reply")
		_, err := m.Acquire(context.Background(), sandbox.AcquireRequest{ContainerID: anonID})
		assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "an ephemeral container leaves no tombstone")
		list, err := m.Containers(context.Background(), "")
		require.NoError(t, err, "Containers of the anonymous identity")
		assert.Empty(t, list, "the anonymous identity has no lasting containers")
		_, err = m.Create(context.Background(), sandbox.CreateRequest{})
		assert.ErrorIs(t, err, sandbox.ErrUnavailable, "Create for the anonymous identity")
	})
}

// TestManagerExpiry: each container expires once idle for its own expiry; every call on it
// refreshes its last activity; an expired container is shown as expired and its id gets
// ErrExpiredContainer until the tombstone goes.
func TestManagerExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		short := create(t, m, sandbox.CreateRequest{Identity: "alice", Name: "short", ExpiresAfter: 2 * time.Minute,
			Spec: sandbox.Spec{MemoryLimit: "4g"}})
		assert.Equal(t, "short", short.Name, "name")
		assert.Equal(t, "4g", short.MemoryLimit, "memory limit as created")
		assert.Equal(t, 2*time.Minute, short.ExpiresAfter, "its own expiry")
		time.Sleep(time.Second)
		long := create(t, m, sandbox.CreateRequest{Identity: "alice", Name: "long"})
		assert.Equal(t, sandbox.DefaultSessionIdleTTL, long.ExpiresAfter, "the default expiry")
		putFile(t, m, "alice", short.ID, "/mnt/data/a.txt", "a")
		assert.Equal(t, 1, p.Created(), "a file written starts the container")

		// Calls refresh the last activity.
		time.Sleep(90 * time.Second)
		assert.Equal(t, time.Now(), info(t, m, "alice", short.ID).LastActiveAt, "Container refreshes it")
		time.Sleep(90 * time.Second)
		synctest.Wait()
		files, err := m.Files(ctx, "alice", short.ID)
		require.NoError(t, err, "Files 90s after the last call")
		assert.Len(t, files, 1, "the file is still there")

		time.Sleep(3 * time.Minute)
		synctest.Wait()
		got := info(t, m, "alice", short.ID)
		assert.Equal(t, sandbox.StatusExpired, got.Status, "idle past its expiry: expired")
		assert.True(t, p.Container(0).Deleted(), "the expired container is deleted")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", long.ID).Status, "the other keeps its own expiry")
		_, err = m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: short.ID})
		assert.ErrorIs(t, err, sandbox.ErrExpiredContainer, "Acquire of an expired container")
		_, err = m.Files(ctx, "alice", short.ID)
		assert.ErrorIs(t, err, sandbox.ErrExpiredContainer, "Files of an expired container")
		_, err = m.PutFile(ctx, "alice", short.ID, "/mnt/data/b", "", strings.NewReader("b"), 0)
		assert.ErrorIs(t, err, sandbox.ErrExpiredContainer, "PutFile into an expired container")
		assert.False(t, m.Known("alice", short.ID), "an expired container is not known")
		assert.NoError(t, m.DeleteContainer(ctx, "alice", short.ID), "deleting an expired container does nothing")

		list, err := m.Containers(ctx, "alice")
		require.NoError(t, err, "Containers")
		require.Len(t, list, 2, "the expired container is still listed")
		assert.Equal(t, []string{short.ID, long.ID}, []string{list[0].ID, list[1].ID}, "by creation")
		assert.Equal(t, []string{sandbox.StatusExpired, sandbox.StatusRunning}, []string{list[0].Status, list[1].Status}, "statuses")

		time.Sleep(sandbox.TombstoneTTL)
		synctest.Wait()
		_, err = m.Container(ctx, "alice", short.ID)
		assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "the tombstone goes after TombstoneTTL")
		list, err = m.Containers(ctx, "alice")
		require.NoError(t, err, "Containers")
		require.Len(t, list, 1, "listed: the long one, expired too")
		assert.Equal(t, sandbox.StatusExpired, list[0].Status, "the long one expired meanwhile")
	})
}

// TestManagerExpiryOnUse: a container idle past its expiry is expired when it is next used,
// even before the pruner has seen it; a lease holding it keeps it.
func TestManagerExpiryOnUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{SessionIdleTTL: time.Hour})
		c := create(t, m, sandbox.CreateRequest{Identity: "alice", ExpiresAfter: time.Second})
		held := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", ContainerID: c.ID})
		time.Sleep(5 * time.Second)
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", c.ID).Status, "held by a lease: running")
		held.Release()
		time.Sleep(2 * time.Second)
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "alice", c.ID).Status, "idle past its expiry at the next call")
	})
}

func TestManagerDeleteContainer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		c := create(t, m, sandbox.CreateRequest{Identity: "alice", Name: "n"})
		putFile(t, m, "alice", c.ID, "/mnt/data/a", "a")
		require.NoError(t, m.DeleteContainer(ctx, "alice", c.ID), "DeleteContainer")
		synctest.Wait()
		assert.True(t, p.Container(0).Deleted(), "deleted")
		got := info(t, m, "alice", c.ID)
		assert.Equal(t, sandbox.StatusExpired, got.Status, "a deleted container is shown expired")
		assert.Equal(t, "n", got.Name, "with its name")
		_, err := m.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: c.ID})
		assert.ErrorIs(t, err, sandbox.ErrExpiredContainer, "Acquire of a deleted container")
	})
}

// TestManagerTombstoneBounds: at most MaxTombstonesPerIdentity of one identity are kept, the
// oldest go first.
func TestManagerTombstoneBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newTestManager(t, &sandboxtest.Provider{}, sandbox.ManagerConfig{})
		var ids []string
		for range sandbox.MaxTombstonesPerIdentity + 1 {
			c := create(t, m, sandbox.CreateRequest{Identity: "alice"})
			require.NoError(t, m.DeleteContainer(ctx, "alice", c.ID), "DeleteContainer")
			ids = append(ids, c.ID)
			time.Sleep(time.Millisecond)
		}
		other := create(t, m, sandbox.CreateRequest{Identity: "bob"})
		require.NoError(t, m.DeleteContainer(ctx, "bob", other.ID), "DeleteContainer")
		_, err := m.Container(ctx, "alice", ids[0])
		assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "the oldest tombstone beyond the bound is gone")
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "alice", ids[1]).Status, "the next is kept")
		list, err := m.Containers(ctx, "alice")
		require.NoError(t, err, "Containers")
		assert.Len(t, list, sandbox.MaxTombstonesPerIdentity, "listed tombstones")
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "bob", other.ID).Status, "another identity's are its own")
	})
}

// TestManagerTenantIsolation: another identity gets ErrUnknownContainer from every method for
// a container of alice's, live or expired, exactly as for an id never issued.
func TestManagerTenantIsolation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		live := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		fi := putFile(t, m, "alice", live.ID, "/mnt/data/secret.txt", "secret")
		gone := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		require.NoError(t, m.DeleteContainer(ctx, "alice", gone.ID), "DeleteContainer")

		for _, id := range []string{live.ID, gone.ID, "cntr_00000000000000000000000000000000"} {
			for _, identity := range []string{"bob", ""} {
				_, err := m.Container(ctx, identity, id)
				assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "%q: Container(%s)", identity, id)
				_, err = m.Acquire(ctx, sandbox.AcquireRequest{Identity: identity, ContainerID: id})
				assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "%q: Acquire(%s)", identity, id)
				_, err = m.PutFile(ctx, identity, id, "/mnt/data/x", "", strings.NewReader("x"), 0)
				assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "%q: PutFile(%s)", identity, id)
				_, err = m.Files(ctx, identity, id)
				assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "%q: Files(%s)", identity, id)
				_, err = m.File(ctx, identity, id, fi.ID)
				assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "%q: File(%s)", identity, id)
				_, _, err = m.OpenFile(ctx, identity, id, fi.ID)
				assert.ErrorIs(t, err, sandbox.ErrUnknownContainer, "%q: OpenFile(%s)", identity, id)
				assert.ErrorIs(t, m.DeleteFile(ctx, identity, id, fi.ID), sandbox.ErrUnknownContainer, "%q: DeleteFile(%s)", identity, id)
				assert.ErrorIs(t, m.DeleteContainer(ctx, identity, id), sandbox.ErrUnknownContainer, "%q: DeleteContainer(%s)", identity, id)
			}
		}
		list, err := m.Containers(ctx, "bob")
		require.NoError(t, err, "Containers")
		assert.Empty(t, list, "bob lists none of alice's")
		c, _ := p.Container(0).FileText("/mnt/data/secret.txt")
		assert.Equal(t, "secret", c, "alice's file untouched")
		assert.Equal(t, "secret", readFile(t, m, "alice", live.ID, fi.ID), "alice still reads it")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", live.ID).Status, "alice's container untouched")
	})
}

// TestManagerKeptLRU: idle kept containers are evicted, least recently used first, at the
// identity's caps and at the global cap; one in use never is.
func TestManagerKeptLRU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{MaxSessionsPerIdentity: 2, MaxContainers: 4})
		a := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		time.Sleep(time.Second)
		b := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		time.Sleep(time.Second)
		info(t, m, "alice", a.ID) // a is now the more recently used
		time.Sleep(time.Second)
		c := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "alice", b.ID).Status, "b, least recently used, evicted")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", a.ID).Status, "a kept")

		held := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", ContainerID: a.ID})
		time.Sleep(time.Second)
		info(t, m, "alice", c.ID)
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", a.ID).Status, "a, leased, never evicted")
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "alice", c.ID).Status, "c evicted instead")
		_, err := m.Create(ctx, sandbox.CreateRequest{Identity: "alice"})
		assert.ErrorIs(t, err, sandbox.ErrUnavailable, "every container of alice's in use")

		// The global cap evicts anyone's idle container, the least recently used first.
		l.Release()
		time.Sleep(time.Second)
		bob := create(t, m, sandbox.CreateRequest{Identity: "bob"})
		time.Sleep(time.Second)
		carol := create(t, m, sandbox.CreateRequest{Identity: "carol"}) // 4 in all: a, l's, bob's, carol's
		time.Sleep(time.Second)
		create(t, m, sandbox.CreateRequest{Identity: "dave"})
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "alice", l.ContainerID()).Status, "alice's idle container made room for dave's")
		assert.True(t, m.Known("bob", bob.ID), "bob's, more recently used, kept")
		assert.True(t, m.Known("carol", carol.ID), "carol's kept")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", a.ID).Status, "leased a kept at the global cap")
		held.Release()
	})
}

// TestManagerFiles: the files table of a container: uploads, listing, reading, replacing,
// deleting, limits and paths.
func TestManagerFiles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		c := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		a := putFile(t, m, "alice", c.ID, "/mnt/data/in/a.csv", "1,2\n")
		assert.Regexp(t, `^cfile_[0-9a-f]{32}$`, a.ID, "file id format")
		assert.Equal(t, sandbox.FileInfo{ID: a.ID, ContainerID: c.ID, Path: "/mnt/data/in/a.csv", Bytes: 4,
			CreatedAt: time.Now(), Source: sandbox.SourceUser}, a, "the uploaded file")
		time.Sleep(time.Second)
		b := putFile(t, m, "alice", c.ID, "b.txt", "bee")
		assert.Equal(t, "/mnt/data/b.txt", b.Path, "a relative path is under /mnt/data")

		files, err := m.Files(ctx, "alice", c.ID)
		require.NoError(t, err, "Files")
		assert.Equal(t, []sandbox.FileInfo{a, b}, files, "by creation")
		got, err := m.File(ctx, "alice", c.ID, b.ID)
		require.NoError(t, err, "File")
		assert.Equal(t, b, got, "File")
		assert.Equal(t, "1,2\n", readFile(t, m, "alice", c.ID, a.ID), "OpenFile")

		again := putFile(t, m, "alice", c.ID, "/mnt/data/in/a.csv", "3,4,5\n")
		assert.Equal(t, a.ID, again.ID, "a replaced file keeps its id")
		assert.Equal(t, int64(6), again.Bytes, "and has its new size")
		assert.Equal(t, "3,4,5\n", readFile(t, m, "alice", c.ID, a.ID), "the new content")

		_, err = m.PutFile(ctx, "alice", c.ID, "/mnt/data/big", "", strings.NewReader("12345"), 4)
		assert.ErrorIs(t, err, sandbox.ErrFileTooLarge, "beyond the limit")
		_, ok := p.Container(0).FileText("/mnt/data/big")
		assert.False(t, ok, "nothing of a file beyond the limit is left")
		boom := errors.New("client went away")
		_, err = m.PutFile(ctx, "alice", c.ID, "/mnt/data/broken", "", io.MultiReader(strings.NewReader("12"), errReader{boom}), 0)
		assert.ErrorIs(t, err, boom, "the reader's error")
		files, err = m.Files(ctx, "alice", c.ID)
		require.NoError(t, err, "Files")
		assert.Len(t, files, 2, "failed writes are not in the table")

		for _, bad := range []string{"/etc/passwd", "/mnt/data", "/mnt/data/", "/mnt/data/../etc/x", "/mnt/dat/x",
			"/mnt/data/a\x00b", "/mnt/data/" + strings.Repeat("x", 256)} {
			_, err := m.PutFile(ctx, "alice", c.ID, bad, "", strings.NewReader("x"), 0)
			assert.ErrorIs(t, err, sandbox.ErrInvalidPath, "PutFile(%q)", bad)
		}
		fi := putFile(t, m, "alice", c.ID, "/mnt/data/x/../y", "y")
		assert.Equal(t, "/mnt/data/y", fi.Path, "a path is cleaned")

		require.NoError(t, m.DeleteFile(ctx, "alice", c.ID, b.ID), "DeleteFile")
		_, ok = p.Container(0).FileText("/mnt/data/b.txt")
		assert.False(t, ok, "DeleteFile removes the file")
		_, err = m.File(ctx, "alice", c.ID, b.ID)
		assert.ErrorIs(t, err, sandbox.ErrFileNotFound, "File after DeleteFile")
		assert.ErrorIs(t, m.DeleteFile(ctx, "alice", c.ID, b.ID), sandbox.ErrFileNotFound, "DeleteFile again")
		_, _, err = m.OpenFile(ctx, "alice", c.ID, "cfile_00000000000000000000000000000000")
		assert.ErrorIs(t, err, sandbox.ErrFileNotFound, "OpenFile of an id never given")

		empty := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		files, err = m.Files(ctx, "alice", empty.ID)
		require.NoError(t, err, "Files of a container never started")
		assert.Empty(t, files, "no files")
		assert.Equal(t, 1, p.Created(), "listing starts no container")
	})
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// TestManagerRunFiles: the files a run wrote become assistant files with ids, set on the
// Result's Files; a user file the code changed keeps its id; a file the code removed
// disappears; an upload a run's scan merely saw is not the code's.
func TestManagerRunFiles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &sandboxtest.Provider{}
		var extra []sandbox.File // files the next run's scan also reports
		p.Run = func(ctx context.Context, c *sandboxtest.Container, code string) (sandbox.Result, error) {
			res := c.Eval(code)
			res.Files = append(res.Files, extra...)
			return res, nil
		}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice"})
		id := l.ContainerID()
		up, err := l.PutFile(ctx, "/mnt/data/data.csv", sandbox.SourceUser, strings.NewReader("a,b\n"), 0)
		require.NoError(t, err, "Lease.PutFile")

		time.Sleep(time.Second)
		extra = []sandbox.File{{Path: "/mnt/data/data.csv", Size: 4}} // new to the container's scan
		res := run(t, l, "write /mnt/data/out.csv x,y")
		require.Len(t, res.Files, 1, "the upload the scan saw is not listed as the run's: %+v", res.Files)
		out := res.Files[0]
		assert.Regexp(t, `^cfile_[0-9a-f]{32}$`, out.ID, "the run's file has an id")
		assert.Equal(t, "/mnt/data/out.csv", out.Path, "path")
		extra = nil

		files, err := m.Files(ctx, "alice", id)
		require.NoError(t, err, "Files")
		require.Len(t, files, 2, "files")
		assert.Equal(t, sandbox.FileInfo{ID: out.ID, ContainerID: id, Path: "/mnt/data/out.csv", Bytes: 3,
			CreatedAt: time.Now(), Source: sandbox.SourceAssistant}, files[1], "the code's file")
		assert.Equal(t, "x,y", readFile(t, m, "alice", id, out.ID), "its content")

		res = run(t, l, "write /mnt/data/data.csv a,b,c")
		require.Len(t, res.Files, 1, "the changed upload is listed")
		assert.Equal(t, up.ID, res.Files[0].ID, "a changed user file keeps its id")
		got, err := m.File(ctx, "alice", id, up.ID)
		require.NoError(t, err, "File")
		assert.Equal(t, int64(5), got.Bytes, "its new size")
		assert.Equal(t, sandbox.SourceUser, got.Source, "and its source")

		res = run(t, l, "write /mnt/data/out.csv x,y,z")
		assert.Equal(t, out.ID, res.Files[0].ID, "a rewritten file keeps its id")

		run(t, l, "remove /mnt/data/out.csv")
		files, err = m.Files(ctx, "alice", id)
		require.NoError(t, err, "Files")
		assert.Equal(t, []string{up.ID}, []string{files[0].ID}, "the file the code removed is gone")
		assert.Len(t, files, 1, "files")
		_, err = m.File(ctx, "alice", id, out.ID)
		assert.ErrorIs(t, err, sandbox.ErrFileNotFound, "File of a removed file")
		l.Release()

		// An ephemeral container takes files too; they go with it.
		anon := acquire(t, m, sandbox.AcquireRequest{})
		_, err = anon.PutFile(ctx, "/mnt/data/in.txt", "", strings.NewReader("hi"), 0)
		require.NoError(t, err, "Lease.PutFile into an ephemeral container")
		c := p.Container(p.Created() - 1)
		text, _ := c.FileText("/mnt/data/in.txt")
		assert.Equal(t, "hi", text, "the file is in the container")
		anon.Release()
		synctest.Wait()
		assert.True(t, c.Deleted(), "deleted after the reply")
	})
}

// TestManagerFilesOfDeadContainer: file calls on a container that died fail with
// ErrExpiredContainer (its state is gone), and a backend without file access is told.
func TestManagerFilesOfDeadContainer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		c := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		fi := putFile(t, m, "alice", c.ID, "/mnt/data/a", "a")
		p.Container(0).Kill()
		_, err := m.File(ctx, "alice", c.ID, fi.ID)
		assert.ErrorIs(t, err, sandbox.ErrExpiredContainer, "File of a dead container")
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "alice", c.ID).Status, "the dead container is expired")

		np := &sandboxtest.Provider{NoFileAccess: true}
		nm := newTestManager(t, np, sandbox.ManagerConfig{})
		nc := create(t, nm, sandbox.CreateRequest{Identity: "alice"})
		_, err = nm.PutFile(ctx, "alice", nc.ID, "/mnt/data/a", "", strings.NewReader("a"), 0)
		assert.ErrorIs(t, err, sandbox.ErrNoFileAccess, "a backend without file access")
	})
}

// TestManagerCloseForgetsAll: Close deletes every container and forgets the tombstones too.
func TestManagerCloseForgetsAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		reg := memory.NewRegistry()
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{Registry: reg})
		live := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		putFile(t, m, "alice", live.ID, "/mnt/data/a", "a")
		gone := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		require.NoError(t, m.DeleteContainer(ctx, "alice", gone.ID), "DeleteContainer")
		require.NoError(t, m.Close(ctx), "Close")
		assert.True(t, p.Container(0).Deleted(), "deleted by Close")
		regs, err := reg.List(ctx, "alice")
		require.NoError(t, err, "List")
		assert.Empty(t, regs, "nothing is left in the registry")
	})
}

// TestManagerFilesTableBound: a container's table holds at most MaxFilesPerContainer files: a
// new one beyond is refused and leaves nothing; replacing a known one still works.
func TestManagerFilesTableBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		c := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		for i := range sandbox.MaxFilesPerContainer {
			_, err := m.PutFile(ctx, "alice", c.ID, fmt.Sprintf("f%d", i), "", strings.NewReader("x"), 0)
			require.NoError(t, err, "PutFile %d", i)
		}
		_, err := m.PutFile(ctx, "alice", c.ID, "one-more", "", strings.NewReader("x"), 0)
		assert.ErrorIs(t, err, sandbox.ErrFileTooLarge, "beyond the table's bound")
		_, ok := p.Container(0).FileText("/mnt/data/one-more")
		assert.False(t, ok, "nothing written")
		_, err = m.PutFile(ctx, "alice", c.ID, "f0", "", strings.NewReader("y"), 0)
		assert.NoError(t, err, "replacing a known file")
		l := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", ContainerID: c.ID})
		res := run(t, l, "write /mnt/data/by-code x")
		require.Len(t, res.Files, 1, "the run's file is listed")
		assert.Equal(t, "", res.Files[0].ID, "without an id beyond the bound")
		l.Release()
	})
}

// TestManagerDownloadHoldsContainer: a reader of a container file holds its container in use
// until it is closed: it does not expire meanwhile, nor is it evicted at the caps; its Close
// refreshes the last activity, and the expiry counts from there.
func TestManagerDownloadHoldsContainer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{MaxSessionsPerIdentity: 2, MaxContainersPerIdentity: 2})
		c := create(t, m, sandbox.CreateRequest{Identity: "alice", ExpiresAfter: time.Minute})
		fi := putFile(t, m, "alice", c.ID, "/mnt/data/big.csv", "a,b\n1,2\n")
		rc, _, err := m.OpenFile(ctx, "alice", c.ID, fi.ID)
		require.NoError(t, err, "OpenFile")
		first := make([]byte, 4)
		_, err = io.ReadFull(rc, first)
		require.NoError(t, err, "read the first bytes")

		time.Sleep(5 * time.Minute)
		synctest.Wait()
		assert.False(t, p.Container(0).Deleted(), "a download in progress past the expiry keeps the container")
		list, err := m.Containers(ctx, "alice")
		require.NoError(t, err, "Containers")
		require.Len(t, list, 1, "Containers")
		assert.Equal(t, sandbox.StatusRunning, list[0].Status, "running while downloaded")

		// At the caps, the container being downloaded, the least recently used, is not the one
		// evicted.
		other := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		time.Sleep(time.Second)
		third := create(t, m, sandbox.CreateRequest{Identity: "alice"})
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "alice", other.ID).Status, "the idle container, used more recently, made room")
		assert.Equal(t, sandbox.StatusRunning, info(t, m, "alice", c.ID).Status, "the download's container kept")
		held := acquire(t, m, sandbox.AcquireRequest{Identity: "alice", ContainerID: third.ID})
		_, err = m.Create(ctx, sandbox.CreateRequest{Identity: "alice"})
		assert.ErrorIs(t, err, sandbox.ErrAtCapacity, "the others in use: the download's container is not evicted")
		held.Release()

		rest, err := io.ReadAll(rc)
		require.NoError(t, err, "read the rest")
		assert.Equal(t, "a,b\n1,2\n", string(first)+string(rest), "the whole file")
		require.NoError(t, rc.Close(), "Close")
		require.NoError(t, rc.Close(), "a second Close")
		assert.Equal(t, time.Now(), info(t, m, "alice", c.ID).LastActiveAt, "Close refreshes the last activity")
		time.Sleep(30 * time.Second)
		synctest.Wait()
		assert.False(t, p.Container(0).Deleted(), "idle for less than its expiry since the Close")
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.True(t, p.Container(0).Deleted(), "expired a minute after the Close")
		assert.Equal(t, sandbox.StatusExpired, info(t, m, "alice", c.ID).Status, "expired")
	})
}

// TestManagerDownloadEnded: deleting a container, or closing the Manager, ends the readers of
// its files still open: their reads fail with ErrClosed, and their Close still works.
func TestManagerDownloadEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &sandboxtest.Provider{}
		m := newTestManager(t, p, sandbox.ManagerConfig{})
		open := func() (sandbox.ContainerInfo, io.ReadCloser) {
			c := create(t, m, sandbox.CreateRequest{Identity: "alice"})
			fi := putFile(t, m, "alice", c.ID, "/mnt/data/a.txt", "abc")
			rc, _, err := m.OpenFile(ctx, "alice", c.ID, fi.ID)
			require.NoError(t, err, "OpenFile")
			return c, rc
		}
		deleted, byDelete := open()
		_, byClose := open()
		one := make([]byte, 1)
		_, err := byDelete.Read(one)
		require.NoError(t, err, "a first read")

		require.NoError(t, m.DeleteContainer(ctx, "alice", deleted.ID), "DeleteContainer")
		_, err = byDelete.Read(one)
		assert.ErrorIs(t, err, sandbox.ErrClosed, "a read once the container is deleted")
		assert.NoError(t, byDelete.Close(), "Close of an ended reader")

		require.NoError(t, m.Close(ctx), "Close the Manager with a reader open")
		assert.Equal(t, 2, p.Deleted(), "every container is deleted")
		_, err = byClose.Read(one)
		assert.ErrorIs(t, err, sandbox.ErrClosed, "a read once the Manager is closed")
		assert.NoError(t, byClose.Close(), "Close after the Manager's")
	})
}
