package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
)

const sample = `syntax = "proto3";

// Package demo.v1 is a sample.
//
// Second paragraph.
package demo.v1;

import "google/protobuf/duration.proto";

// A detached comment, ended by a blank line.

// Outer is the outer message.
message Outer {
  // name names it,
  // over two lines.
  string name = 1;

  optional uint32 count = 2;
  // inner is nested.
  Inner inner = 3;
  // tags are tags.
  map<string, Inner> tags = 4;

  // Inner is nested.
  message Inner {
    // deep is inside Inner.
    repeated string deep = 1;
  }
  // after is after Inner.
  google.protobuf.Duration after = 5;
}
`

func TestParseComments(t *testing.T) {
	got, err := parseComments(strings.NewReader(sample))
	require.NoError(t, err, "parse the sample")
	want := map[string]string{
		"":                         "Package demo.v1 is a sample.\n\nSecond paragraph.",
		"demo.v1.Outer":            "Outer is the outer message.",
		"demo.v1.Outer.name":       "name names it, over two lines.",
		"demo.v1.Outer.inner":      "inner is nested.",
		"demo.v1.Outer.tags":       "tags are tags.",
		"demo.v1.Outer.Inner":      "Inner is nested.",
		"demo.v1.Outer.Inner.deep": "deep is inside Inner.",
		"demo.v1.Outer.after":      "after is after Inner.",
	}
	assert.Equal(t, want, got, "comments of the sample by full name (count has none)")
}

// TestPageCoversTheProto: the page for the real proto has a heading for every field of every
// message the configuration reaches, and each field's comment under it.
func TestPageCoversTheProto(t *testing.T) {
	file := configv1.File_codeinterp_config_v1_config_proto
	f, err := os.Open(filepath.Join("..", "..", "api", file.Path()))
	require.NoError(t, err, "open the proto")
	defer f.Close()
	comments, err := parseComments(f)
	require.NoError(t, err, "parse the proto's comments")
	page := render(file, "api/"+file.Path(), comments)

	secs := sections(file.Messages().ByName("Config"))
	require.Len(t, secs, 14, "Config, Profile, Sandbox, LocalSandbox, ApiKeyCheck, Redis, FleetTLS, Tracing, Network, AnthropicFiles, Ptc, Skills, Responses, Hibernation")
	for _, s := range secs {
		assert.Contains(t, page, "\n## "+title(s)+"\n", "a section for %s", s.md.FullName())
		fields := s.md.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			assert.Contains(t, page, "`"+join(s.places[0], string(fd.Name()))+"`", "a heading for %s", fd.FullName())
			assert.Contains(t, page, text(comments[string(fd.FullName())]), "the comment of %s", fd.FullName())
		}
	}
	assert.Equal(t, []string{"default_profile", "profiles.<name>"}, secs[1].places, "where a Profile sits")
	assert.Contains(t, page, "### `sandbox.local.first_uid`, `sandbox.local.uid_count`\n", "uid_count shares first_uid's comment")
	assert.Contains(t, page, "also written `warmPoolSize`), optional: an explicit `0` is kept", "an optional field says so")
	assert.Contains(t, page, `x-codeinterp-\*`, "a * is escaped")
}

// TestRunWritesThePage: run writes what render makes, to -out.
func TestRunWritesThePage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "configuration.md")
	require.NoError(t, run([]string{"-api", filepath.Join("..", "..", "api"), "-out", out}), "run")
	got, err := os.ReadFile(out)
	require.NoError(t, err, "read the page")
	assert.True(t, strings.HasPrefix(string(got), "# Configuration reference\n"), "the page's title")
	assert.Contains(t, string(got), "## sandbox.local (LocalSandbox)\n", "the last section")

	assert.Error(t, run([]string{"-api", t.TempDir(), "-out", out}), "run without the proto")
	assert.Error(t, run([]string{"stray"}), "run with a stray argument")
}

func TestAnchor(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{give: "Top level (Config)", want: "top-level-config"},
		{give: "default_profile (Profile)", want: "default_profile-profile"},
		{give: "sandbox.local (LocalSandbox)", want: "sandboxlocal-localsandbox"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, anchor(tt.give), "anchor(%q)", tt.give)
	}
}
