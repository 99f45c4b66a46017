// Command configdoc writes the configuration reference, docs/configuration.md, from the
// configuration's proto: the structure (sections, fields, types, YAML keys) from the generated
// descriptors through protoreflect, the text from the comments of the .proto file they were
// generated from (the generated descriptors carry no comments). `make docs` runs it;
// `make docs-check` fails when the page in the tree is not what it writes.
//
//	configdoc -api api -out docs/configuration.md
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}
