package procfs

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
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

func TestRunning(t *testing.T) {
	if !Running(os.Getpid()) {
		t.Error("this process is not running")
	}
	if Running(1 << 30) {
		t.Error("a pid beyond the kernel's limit is running")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Not reaped until Wait: a zombie once it ended.
	zombie := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !zombie; time.Sleep(10 * time.Millisecond) {
		zombie = !Running(cmd.Process.Pid)
	}
	if !zombie {
		t.Error("an ended, unreaped child still counts as running")
	}
	_ = cmd.Wait()
}

func TestStartTime(t *testing.T) {
	a, ok := StartTime(os.Getpid())
	if !ok || a == 0 {
		t.Fatalf("StartTime of this process = %d, %v", a, ok)
	}
	if b, _ := StartTime(os.Getpid()); b != a {
		t.Errorf("StartTime changed: %d then %d", a, b)
	}
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if c, ok := StartTime(cmd.Process.Pid); !ok || c < a {
		t.Errorf("a child started after this process has start time %d < %d", c, a)
	}
	if _, ok := StartTime(1 << 30); ok {
		t.Error("a pid beyond the kernel's limit has a start time")
	}
}

func TestParentPid(t *testing.T) {
	if got := ParentPid(os.Getpid()); got != os.Getppid() {
		t.Errorf("ParentPid(self) = %d, want %d", got, os.Getppid())
	}
	if got := ParentPid(-1); got != 0 {
		t.Errorf("ParentPid(-1) = %d, want 0", got)
	}
}
