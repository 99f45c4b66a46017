package local

import "golang.org/x/sys/unix"

// containerLayout is what a container is made of, as both start modes make it: bwrapArgs turns
// it into bubblewrap's arguments (the exec start), and the fork template (template.py) gets it
// in its configuration (templateConfig) and mounts and names each container it forks by it, so
// that the two cannot differ.
type containerLayout struct {
	hostname  string
	uid       int    // the code's uid and gid inside its user namespace
	dataDir   string // the container's files: a tmpfs of dataBytes
	tmpBytes  int64  // the size of its /tmp, and of its /dev/shm
	dataBytes int64
}

// layout returns the layout of the Local's containers.
func (l *Local) layout() containerLayout {
	return containerLayout{hostname: sandboxName, uid: sandboxUID, dataDir: dataDir, tmpBytes: l.cfg.TmpBytes, dataBytes: l.cfg.DataBytes}
}

func (c containerLayout) encode() map[string]any {
	return map[string]any{
		"hostname": c.hostname, "uid": c.uid, "data_dir": c.dataDir, "tmp_bytes": c.tmpBytes, "data_bytes": c.dataBytes,
	}
}

// templateConfig is the fork template's configuration, its argv[2] (marshalled, in hex).
type templateConfig struct {
	driver    []byte // the driver, compiled and marshalled (Local.driverCode)
	seccomp   []byte // the containers' seccomp filter; nil for none
	preload   bool   // import the preloaded libraries
	layout    containerLayout
	makerWait float64 // the seconds a fork waits for an init (less than the server waits for its answer)
}

func (c templateConfig) encode() map[string]any {
	return map[string]any{
		"driver": c.driver, "seccomp": c.seccomp, "preload": c.preload, "layout": c.layout.encode(), "maker_wait": c.makerWait,
		// This machine's numbers of the system calls the template makes through libc's
		// syscall(), which Python has no wrapper of.
		"syscalls": map[string]any{"close_range": unix.SYS_CLOSE_RANGE, "capset": unix.SYS_CAPSET, "seccomp": unix.SYS_SECCOMP},
	}
}
