package runc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

var (
	_ runtime.PIDNamespaced = (*container)(nil)
	_ runtime.Resizable     = (*container)(nil)
)

// container is one run under runc.
type container struct {
	*runtime.Ending
	r          *Runtime
	id, dir    string
	run        int32
	started    time.Time
	stdin, tty bool
	pid        int // the container's init, in the host's PID namespace
}

// PIDNamespace implements runtime.PIDNamespaced.
func (c *container) PIDNamespace() string { return fmt.Sprintf("/proc/%d/ns/pid", c.pid) }

// finish reads how the run ended, from the exit file the exit hook wrote.
func (c *container) finish() {
	exit := runtime.Exit{Run: c.run, StartedAt: c.started, FinishedAt: time.Now(), ExitCode: 255,
		Message: "the container's end was not recorded (its monitor was killed)"}
	if b, err := os.ReadFile(filepath.Join(c.dir, exitFile)); err == nil {
		var e runtime.Exit
		if json.Unmarshal(b, &e) == nil && e.Run == c.run {
			exit = e
		}
	}
	// A run that ended before the agent recorded its start (a command
	// that exits at once) has its hook find no start time: the agent's.
	if exit.StartedAt.IsZero() {
		exit.StartedAt = c.started
	}
	// The hook may take the end from a file's modification time, which the
	// kernel stamps from its coarse clock (up to a tick behind): a run that
	// ended at once can seem to end before the agent's fine-grained start.
	if exit.FinishedAt.Before(exit.StartedAt) {
		exit.FinishedAt = exit.StartedAt
	}
	c.Finish(exit)
}

func (c *container) ID() string { return "runc://" + c.id }

func (c *container) StartedAt() time.Time { return c.started }

// Stop sends SIGTERM to the container's init, and SIGKILL after grace. In
// its own PID namespace, the end of init ends every process of it.
func (c *container) Stop(grace time.Duration) {
	runtime.StopWithGrace(c.Done(), grace,
		func() { _ = c.r.runc("kill", c.id, "TERM").Run() },
		func() { _ = c.r.runc("kill", c.id, "KILL").Run() })
}

// Command runs argv inside the container (runc exec), as the container's
// user, with the container's environment plus env.
func (c *container) Command(argv, env []string, dir string, tty bool) *exec.Cmd {
	args := []string{"exec"}
	if tty {
		// runc makes a terminal in the container and relays it to its own
		// stdin, which follows that terminal's size on SIGWINCH.
		args = append(args, "--tty")
	}
	if dir != "" {
		args = append(args, "--cwd", dir)
	}
	for _, e := range env {
		args = append(args, "--env", e)
	}
	args = append(append(args, c.id), argv...)
	return c.r.runc(args...)
}

// Resize implements runtime.Resizable with runc update, given the
// resources as JSON on its stdin (as containerd's UpdateContainerResources).
func (c *container) Resize(ctx context.Context, r runtime.Resources) error {
	b, err := json.Marshal(linuxResources(r, true))
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, c.r.opts.Binary, "--root", c.r.opts.Root, "update", "--resources", "-", c.id)
	cmd.Stdin = bytes.NewReader(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("runc update: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
