// Package process is the node agent's fallback runtime: each container is a
// host process in its own process group, with the host's network, files and
// the agent's user. It isolates nothing; it is used where runc or root is
// missing, and says so.
package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
)

// Runtime runs containers as host processes.
type Runtime struct{}

var _ runtime.Runtime = Runtime{}

// Name implements runtime.Runtime.
func (Runtime) Name() string { return "process" }

// Isolated implements runtime.Runtime: host processes are not.
func (Runtime) Isolated() bool { return false }

// CreateSandbox implements runtime.Runtime: a pod of host processes shares
// everything with the host.
func (Runtime) CreateSandbox(id, dir, _ string, _ bool) (*runtime.Sandbox, error) {
	return &runtime.Sandbox{ID: id, Dir: dir}, os.MkdirAll(dir, 0o700)
}

// RemoveSandbox implements runtime.Runtime.
func (Runtime) RemoveSandbox(*runtime.Sandbox) error { return nil }

// Start implements runtime.Runtime: cfg's argv as a process group of its own,
// recorded in a pid file with its start time.
func (Runtime) Start(_ context.Context, cfg *runtime.ContainerConfig) (runtime.Container, error) {
	if len(cfg.Argv) == 0 {
		return nil, errors.New("no command")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.LogPath), 0o700); err != nil {
		return nil, err
	}
	// Rotated as the kubelet rotates by default; the process runtime is the
	// agent's own child, so the agent's writer does it.
	logFile, err := crilog.OpenRotating(cfg.LogPath, crilog.DefaultMaxSize, crilog.DefaultMaxFiles)
	if err != nil {
		return nil, err
	}
	log := crilog.NewFile(logFile)
	cmd := exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
	cmd.Env, cmd.Dir = cfg.Env, cfg.WorkingDir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cfg.DieWithAgent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	pidPath := filepath.Join(cfg.Dir, "pid")
	if st, ok := StartTime(cmd.Process.Pid); ok {
		_ = atomicfile.WriteFile(pidPath, []byte(fmt.Sprintf("%d %d\n", cmd.Process.Pid, st)), 0o600)
	}
	p := &proc{Ending: runtime.NewEnding(), cmd: cmd, started: time.Now()}
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); crilog.Copy(log, "stdout", stdout) }()
	go func() { defer copies.Done(); crilog.Copy(log, "stderr", stderr) }()
	go func() {
		killGroupOnExit(cmd.Process.Pid)
		copies.Wait() // Wait closes the pipes: read them to the end first
		err := cmd.Wait()
		logFile.Close()
		exit := runtime.Exit{Run: cfg.Run, StartedAt: p.started, FinishedAt: time.Now()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				exit.ExitCode = 128 + int32(ws.Signal())
				exit.Signal = unix.SignalName(ws.Signal())
			} else {
				exit.ExitCode = int32(ee.ExitCode())
			}
		} else if err != nil {
			exit.ExitCode, exit.Message = 128, err.Error()
		}
		os.Remove(pidPath)
		p.Finish(exit)
	}()
	return p, nil
}

// Adopt implements runtime.Runtime. A host process left by a previous agent
// cannot be watched to its end (it is not the agent's child), so it is
// stopped and reported ended: the worker starts it again, once, and never
// two copies run.
func (Runtime) Adopt(cfg *runtime.ContainerConfig) (runtime.Container, bool) {
	started, ok := StopLeftover(filepath.Join(cfg.Dir, "pid"), 10*time.Second)
	if !ok {
		return nil, false
	}
	p := &proc{Ending: runtime.NewEnding(), started: started}
	p.Finish(runtime.Exit{
		Run: cfg.Run, ExitCode: 128 + int32(syscall.SIGTERM), Signal: "SIGTERM", StartedAt: started, FinishedAt: time.Now(),
		Message: "stopped: a previous node agent left it running, and host processes cannot be adopted",
	})
	return p, true
}

// proc is one run of a container as a host process.
type proc struct {
	*runtime.Ending
	cmd     *exec.Cmd // nil for a stopped leftover
	started time.Time
}

func (p *proc) ID() string {
	if p.cmd == nil {
		return ""
	}
	return "process://" + strconv.Itoa(p.cmd.Process.Pid)
}

func (p *proc) StartedAt() time.Time { return p.started }

// Stop sends SIGTERM to the process group, and SIGKILL after grace.
func (p *proc) Stop(grace time.Duration) {
	if p.cmd == nil {
		return // a leftover, stopped when it was found
	}
	pgid := -p.cmd.Process.Pid
	runtime.StopWithGrace(p.Done(), grace,
		func() { _ = syscall.Kill(pgid, syscall.SIGTERM) },
		func() { _ = syscall.Kill(pgid, syscall.SIGKILL) })
}

// Command runs argv on the host, as the container does; a terminal given
// as stdin is the command's own.
func (p *proc) Command(argv, env []string, dir string, _ bool) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	return cmd
}

// killGroupOnExit waits until the container's main process has exited, and
// kills what it left in its process group (a daemonized child, a shell's
// background job), as the end of a container ends all of it. The process is
// not reaped yet: while it is a zombie its pid, and so its group id, cannot
// name another process.
func killGroupOnExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// StartTime returns a process's start time in clock ticks since boot (field
// 22 of /proc/<pid>/stat): with the pid, it names one process for good.
func StartTime(pid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return v, err == nil
}

// ReadPidFile returns the pid a pid file of StartTime's format names, if
// that process still runs (the start time rules out a reused pid).
func ReadPidFile(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	var pid int
	var st uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &st); err != nil || pid <= 1 {
		return 0, false
	}
	if now, ok := StartTime(pid); !ok || now != st {
		return 0, false // gone, or the pid now names another process
	}
	return pid, true
}

// WritePidFile records pid with its start time at path.
func WritePidFile(path string, pid int) error {
	st, ok := StartTime(pid)
	if !ok {
		return fmt.Errorf("process %d is gone", pid)
	}
	return atomicfile.WriteFile(path, []byte(fmt.Sprintf("%d %d\n", pid, st)), 0o600)
}

// StopLeftover stops the process group a pid file names, if it still runs
// (an agent that exited without stopping its containers left it), removes
// the file, and reports when that process had started.
func StopLeftover(pidPath string, grace time.Duration) (time.Time, bool) {
	pid, ok := ReadPidFile(pidPath)
	defer os.Remove(pidPath)
	if !ok {
		return time.Time{}, false
	}
	started := time.Now()
	if st, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		started = st.ModTime()
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if _, alive := ReadPidFile(pidPath); !alive {
			return started, true
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return started, true
}
