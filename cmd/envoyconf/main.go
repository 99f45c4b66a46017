// Command envoyconf writes the shipped Envoy bootstrap with its model cluster pointed at an
// upstream model API, for `make run`:
//
//	envoyconf -in envoy/envoy.yaml -upstream https://api.openai.com -out bin/envoy-run.json
//
// With -anthropic-uploads it also routes Anthropic's file uploads (POST /v1/files and the
// file_… ids) to codeinterp, for a server with anthropic_files.own_uploads.
package main

import (
	"flag"
	"fmt"
	"os"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/codeinterp/codeinterp/envoy"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "envoyconf:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("envoyconf", flag.ContinueOnError)
	var (
		in       = fs.String("in", "envoy/envoy.yaml", "the bootstrap `file` to start from")
		out      = fs.String("out", "", "where to write the result (JSON, which Envoy reads as YAML)")
		cluster  = fs.String("cluster", "llm", "the `cluster` to point at the upstream")
		upstream = fs.String("upstream", "http://127.0.0.1:8080", "the model API's base `URL` (http or https)")
		address  = fs.String("listen-address", "", "if set, the `IP` the ingress listener binds (its port is kept)")
		uploads  = fs.Bool("anthropic-uploads", false, "route Anthropic's file uploads (/v1/files, /v1/files/file_…) to codeinterp's API listener (anthropic_files.own_uploads)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: envoyconf -in FILE -upstream URL -out FILE")
	}
	b, err := envoy.Load(*in)
	if err != nil {
		return err
	}
	if err := envoy.PointCluster(b, *cluster, *upstream); err != nil {
		return err
	}
	if *address != "" {
		in, err := envoy.FindIngress(b)
		if err != nil {
			return err
		}
		in.Listener.GetAddress().GetSocketAddress().Address = *address
	}
	if *uploads {
		if err := envoy.RouteAnthropicUploads(b); err != nil {
			return err
		}
	}
	if err := envoy.Validate(b); err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	js, err := protojson.MarshalOptions{Multiline: true}.Marshal(b)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return os.WriteFile(*out, js, 0o644)
}
