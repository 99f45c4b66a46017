// Command extproc is the codeinterp Envoy ext_proc server: it gives OpenAI's hosted
// code_interpreter tool to any model behind Envoy. See docs/operations.md for flags and configuration.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "extproc:", err)
		os.Exit(1)
	}
}
