// Command badup is a broken steadyplane release for the upgrade tests: its
// version says a release (set with -ldflags -X main.release=... and
// main.kubernetes=...), as a release build's does, and its up exits at
// once, as a release that cannot start would.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

var (
	release    = "v0.9.3"
	kubernetes = "v1.36.3"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "version" {
		_ = json.NewEncoder(os.Stdout).Encode(map[string]string{
			"release": release, "kubernetes": kubernetes, "commit": "broken",
			"gitVersion": kubernetes + "+steadyplane-" + release,
		})
		return
	}
	fmt.Fprintf(os.Stderr, "steadyplane %s (a broken release for tests): exiting at start\n", release)
	os.Exit(1)
}
