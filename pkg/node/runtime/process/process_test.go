package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/steadyplane/steadyplane/internal/testproc"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
)

func config(dir string, argv ...string) *runtime.ContainerConfig {
	return &runtime.ContainerConfig{ID: "c", Dir: filepath.Join(dir, "c"), LogPath: filepath.Join(dir, "c", "0.log"), Argv: argv, DieWithAgent: true}
}

func waitDone(t *testing.T, c runtime.Container) runtime.Exit {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		c.Stop(0)
		t.Fatal("the container did not end")
	}
	return c.Exit()
}

func TestProcessLifecycle(t *testing.T) {
	dir := t.TempDir()
	cfg := config(dir, "sh", "-c", "echo $GREETING; echo oops >&2; trap 'echo bye; exit 0' TERM; while :; do sleep 0.05; done")
	cfg.Env = []string{"GREETING=hello", "PATH=/usr/bin:/bin"}
	c, err := Runtime{}.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	c.Stop(5 * time.Second)
	b, _ := os.ReadFile(cfg.LogPath)
	lines := "|" + strings.Join(crilog.Lines(b), "|") + "|"
	if e := c.Exit(); e.ExitCode != 0 || !strings.Contains(lines, "|hello|") || !strings.Contains(lines, "|oops|") || !strings.Contains(lines, "|bye|") {
		t.Errorf("SIGTERM: %+v, log %q; want a clean exit through the trap", e, lines)
	}
	if !strings.Contains(string(b), " stderr F oops") {
		t.Errorf("log is not in the CRI format: %q", b)
	}

	c, err = Runtime{}.Start(context.Background(), config(dir, "sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	c.Stop(300 * time.Millisecond)
	if e := c.Exit(); e.ExitCode != 128+int32(syscall.SIGKILL) || e.Signal != "SIGKILL" || time.Since(start) > 3*time.Second {
		t.Errorf("a container ignoring SIGTERM: %+v after %v; want SIGKILL after the grace period", e, time.Since(start))
	}
	if _, err := (Runtime{}).Start(context.Background(), config(dir)); err == nil {
		t.Error("a container without a command started")
	}
}

func TestAdoptStopsLeftover(t *testing.T) {
	dir := t.TempDir()
	cfg := config(dir, "sleep", "60")
	cfg.DieWithAgent = false
	c, err := Runtime{}.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	left, ok := Runtime{}.Adopt(cfg)
	if !ok || !strings.Contains(left.Exit().Message, "previous node agent") {
		t.Fatalf("Adopt: %v %+v", ok, left)
	}
	waitDone(t, c)
	if _, err := os.Stat(filepath.Join(cfg.Dir, "pid")); !os.IsNotExist(err) {
		t.Error("pid file kept")
	}
	if _, ok := (Runtime{}).Adopt(cfg); ok {
		t.Error("nothing left, yet Adopt found a run")
	}
	// A pid file naming a live process with another start time (a reused
	// pid) must not touch it: here, this test process itself.
	pidPath := filepath.Join(cfg.Dir, "pid")
	os.WriteFile(pidPath, []byte(fmt.Sprintf("%d 1\n", os.Getpid())), 0o600)
	if _, ok := StopLeftover(pidPath, time.Second); ok {
		t.Error("a reused pid was taken for a leftover")
	}
	os.WriteFile(pidPath, []byte("garbage"), 0o600)
	if _, ok := StopLeftover(pidPath, time.Second); ok {
		t.Error("a torn pid file was taken for a leftover")
	}
}

// TestContainerExitEndsItsGroup: a container whose main process exits by
// itself takes what it left in its process group with it.
func TestContainerExitEndsItsGroup(t *testing.T) {
	dir := t.TempDir()
	childFile := filepath.Join(dir, "child")
	c, err := Runtime{}.Start(context.Background(), config(dir, "sh", "-c", "sleep 300 & echo $! > "+childFile+"; exit 0"))
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, c)
	b, err := os.ReadFile(childFile)
	if err != nil {
		t.Fatal(err)
	}
	var child int
	if _, err := fmt.Sscanf(string(b), "%d", &child); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for testproc.Alive(child) {
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the container's background child %d outlived it", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
