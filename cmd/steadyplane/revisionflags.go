package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
)

// revisionFlags name one revision of an operand's static pod on this node:
// the flags of the commands the operator runs there (installer, startup
// monitor), which must agree on where revisions live.
type revisionFlags struct {
	dataDir, operand string
	revision         int
}

// add registers --data-dir, --operand and --revision (required) on fs.
func (f *revisionFlags) add(fs *pflag.FlagSet, revisionUsage string) {
	fs.StringVar(&f.dataDir, "data-dir", ".steadyplane", "steadyplane's data directory: static-pod-resources/, manifests/ and locks/ in it.")
	fs.StringVar(&f.operand, "operand", "kube-apiserver", "Name of the operand static pod.")
	fs.IntVar(&f.revision, "revision", 0, revisionUsage)
}

// check rejects a revision that cannot exist.
func (f *revisionFlags) check() error {
	if f.revision < 1 {
		return fmt.Errorf("--revision=%d: a revision is a number from 1", f.revision)
	}
	return nil
}

// layout is where the operand's revisions live under --data-dir.
func (f *revisionFlags) layout() revisions.Layout { return revisions.ForDataDir(f.dataDir, f.operand) }
