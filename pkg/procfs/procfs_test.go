package procfs

import (
	"os"
	"slices"
	"testing"
)

func TestFindsItself(t *testing.T) {
	self := os.Args
	pids := Find(func(argv []string) bool { return slices.Equal(argv, self) })
	if !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("Find(own argv %q) = %v, want to contain %d", self, pids, os.Getpid())
	}
	if pids := Find(func(argv []string) bool { return len(argv) > 0 && argv[0] == "/no/such/binary-procfs-test" }); len(pids) != 0 {
		t.Fatalf("found %v for a binary that does not run", pids)
	}
}
