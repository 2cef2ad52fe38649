// Command hello is the demo app that `make demo` packs into an ACI and
// runs in a pod: it says where it runs, from inside the pod. Its lines need
// not name it: the console prints each as "<app>[<pid>]: <line>".
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	host, _ := os.Hostname()
	wd, _ := os.Getwd()
	ents, _ := os.ReadDir("/")
	var root []string
	for _, e := range ents {
		root = append(root, e.Name())
	}
	fmt.Printf("hello from pid %d (uid %d) on host %q, cwd %s\n", os.Getpid(), os.Getuid(), host, wd)
	fmt.Printf("my root holds: %s\n", strings.Join(root, " "))
	if len(os.Args) > 1 {
		d, err := time.ParseDuration(os.Args[1])
		if err == nil {
			time.Sleep(d)
		}
	}
	if len(os.Args) > 2 {
		code, _ := strconv.Atoi(os.Args[2])
		fmt.Printf("exiting with %d\n", code)
		os.Exit(code)
	}
	fmt.Printf("done\n")
}
