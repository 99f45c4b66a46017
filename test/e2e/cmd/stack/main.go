// Command stack runs the end-to-end stack for test drivers in other languages (the Python SDK
// suite in test/python): the scripted fake model with its HTTP control API, the codeinterp
// server wired as test/e2e's scenarios wire it (app.New, e2e.DefaultConfig with
// defaults applied and validated, the local bubblewrap sandbox), and a real Envoy running the
// shipped envoy/envoy.yaml pointed at them. Once all of it serves, it prints one JSON line on
// stdout:
//
//	{"envoy_url":"http://127.0.0.1:…","control_url":"http://127.0.0.1:…","model_url":"…","extproc_addr":"…","api_addr":"…"}
//
// Flags change the wiring: -upstream points Envoy at a model of the driver's own instead of the
// fake model; -front runs no Envoy, for a driver that runs a front of its own at the URL given
// and hands the server its listeners (descriptors 3 and 4); -start, -max-containers and
// -max-containers-per-identity set the local sandbox's start mode and the container caps;
// -envoy, -envoy-config and -log-level choose Envoy's binary, its bootstrap and the log level.
//
// It stops everything (Envoy, the server and its sandboxes, the fake model) on SIGTERM or
// SIGINT, or, when stdin is a pipe or a socket (as a test driver passes it), when stdin reaches
// its end: the driver closes its end, or dies. It exits 0 only if all of it stopped cleanly and
// no process it started (Envoy, bubblewrap, a sandbox's Python) is left.
//
// Run it from the module (it finds envoy/envoy.yaml and .venv/bin/envoy from the working
// directory): go run ./test/e2e/cmd/stack.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	var in io.ReadCloser
	if f := stdin(); f != nil {
		in = f
	}
	err := run(ctx, os.Args[1:], in, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stack:", err)
		os.Exit(1)
	}
}

// stdin returns standard input to watch for its end when it is a pipe or a socket, else nil
// (a terminal, /dev/null or a file: the stack then stops on signals only). The pipe is set
// non-blocking so that Go's poller serves it and Close ends a Read in progress: a blocking
// descriptor is read by a thread no Close can wake, and the watcher could not be waited for
// after a signal. The pipe is the driver's, made for this process, so its mode is ours to set.
func stdin() *os.File {
	var st syscall.Stat_t
	if err := syscall.Fstat(syscall.Stdin, &st); err != nil {
		return nil
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFIFO && st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return nil
	}
	if err := syscall.SetNonblock(syscall.Stdin, true); err != nil {
		return nil
	}
	return os.NewFile(uintptr(syscall.Stdin), "/dev/stdin")
}
