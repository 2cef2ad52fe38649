// Command mkheader writes waiter/handover.h from handover.go (go generate
// in stage1-init/handover).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/pod1/pod1/stage1-init/handover/internal/cheader"
)

func main() {
	out := flag.String("o", "", "the header to write")
	in := flag.String("i", "handover.go", "the Go file of the hand-over")
	flag.Parse()
	b, err := cheader.Generate(*in)
	if err == nil {
		if *out == "" {
			_, err = os.Stdout.Write(b)
		} else {
			err = os.WriteFile(*out, b, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "mkheader: %v\n", err)
		os.Exit(1)
	}
}
