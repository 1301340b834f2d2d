package runc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/logfile"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/process"
)

// files of a container's directory
const (
	bundleDir        = "bundle"
	runFile          = "run.json"  // the current run: number, pids, start time
	exitFile         = "exit.json" // how the last run ended (the exit hook writes it)
	monitorPidFile   = "monitor.pid"
	monitorLogFile   = "monitor.log"
	containerPidFile = "container.pid"
	runcLogFile      = "runc.log"
	exitDir          = "exits"   // conmon's exit code, in a file named by the container id
	persistDir       = "persist" // conmon's own record of the run
	socketDir        = "sockets" // conmon's attach socket
	startTimeout     = time.Minute
)

// runRecord is a run as the agent records it once the container started.
type runRecord struct {
	Run       int32     `json:"run"`
	ID        string    `json:"id"`
	Pid       int       `json:"pid"`
	StartedAt time.Time `json:"startedAt"`
	// LogPath is the run's log, which the agent rotates while it runs.
	LogPath string `json:"logPath,omitempty"`
	// Stdin and TTY tell what an attach finds.
	Stdin bool `json:"stdin,omitempty"`
	TTY   bool `json:"tty,omitempty"`
}

func (r *Runtime) cgroupsPath(id string) string { return r.opts.CgroupParent + "/" + id }

// Start implements runtime.Runtime: writes the bundle, starts a monitor
// (conmon) that creates the container and waits for it, starts it, and
// returns once the container runs (or with runc's error).
func (r *Runtime) Start(ctx context.Context, cfg *runtime.ContainerConfig) (runtime.Container, error) {
	if len(cfg.Argv) == 0 {
		return nil, errors.New("no command")
	}
	rootfs, err := r.writeBundle(cfg)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started && cfg.Rootfs != nil {
			_ = unmountAt(rootfs)
		}
	}()
	m, err := r.startMonitor(cfg)
	if err != nil {
		return nil, err
	}
	defer m.sync.Close()
	c := &container{Ending: runtime.NewEnding(), r: r, id: cfg.ID, dir: cfg.Dir, run: cfg.Run, stdin: cfg.Stdin, tty: cfg.TTY}
	line, err := readLine(ctx, m.sync, startTimeout, stopStartGrace)
	if err != nil && line == "" {
		if errors.Is(err, io.EOF) {
			// conmon ended without a word: its own log says why.
			<-m.ended
			return nil, fmt.Errorf("the container's monitor ended before the container was created: %s", monitorSaid(filepath.Join(cfg.Dir, monitorLogFile)))
		}
		r.abortStart(m.pid, m.ended, cfg, err)
		return nil, fmt.Errorf("starting the container: %w", err)
	}
	pid, err := parseSyncMessage(line)
	if err != nil {
		<-m.ended
		return nil, errors.New(runcError(cfg.Dir, err))
	}
	startedAt := time.Now()
	if err := r.runcStart(ctx, cfg.ID); err != nil {
		r.abortStart(m.pid, m.ended, cfg, err)
		return nil, err
	}
	rec, _ := json.Marshal(runRecord{Run: cfg.Run, ID: cfg.ID, Pid: pid, StartedAt: startedAt, LogPath: cfg.LogPath, Stdin: cfg.Stdin, TTY: cfg.TTY})
	if err := atomicfile.WriteFile(filepath.Join(cfg.Dir, runFile), rec, 0o600); err != nil {
		r.abortStart(m.pid, m.ended, cfg, err)
		return nil, err
	}
	started = true // the exit hook takes the root filesystem down when the run ends
	c.started, c.pid = startedAt, pid
	stopRotating := r.logs.watch(cfg.LogPath, filepath.Join(cfg.Dir, bundleDir, "ctl"))
	go func() {
		<-m.ended
		stopRotating()
		c.finish()
	}()
	return c, nil
}

// writeBundle makes the run's OCI bundle in cfg.Dir (its config.json, its
// root filesystem: the image's layers mounted, or the host's system
// directories), after what an earlier run of the container left (its
// monitor, runc's state, its files) is gone. It returns the root
// filesystem's path.
func (r *Runtime) writeBundle(cfg *runtime.ContainerConfig) (string, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return "", err
	}
	system := r.system
	if cfg.Rootfs != nil {
		system = nil // the image is the root; nothing of the host
	}
	spec := Spec(cfg, system, r.cgroupsPath(cfg.ID))
	if err := applySeccomp(spec, cfg.Seccomp, cfg.Privileged); err != nil {
		return "", err
	}
	bundle := filepath.Join(cfg.Dir, bundleDir)
	rootfs := filepath.Join(bundle, "rootfs")
	r.removeEarlierRun(cfg)
	if cfg.Rootfs != nil {
		if err := mountImageRootfs(rootfs, cfg.Dir, cfg.Rootfs); err != nil {
			return "", fmt.Errorf("root filesystem: %w", err)
		}
	}
	if err := prepareRootfs(rootfs, spec, system); err != nil {
		if cfg.Rootfs != nil {
			_ = unmountAt(rootfs)
		}
		return "", fmt.Errorf("root filesystem: %w", err)
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err == nil {
		err = atomicfile.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600)
	}
	if err == nil {
		err = resetRunFiles(cfg)
	}
	if err != nil && cfg.Rootfs != nil {
		_ = unmountAt(rootfs)
	}
	return rootfs, err
}

// removeEarlierRun ends a run the agent found none to adopt (a dead
// monitor's, or one created but never started when an agent died): gone
// for good, its monitor first, so that its exit hook cannot delete the run
// made now. runc is asked to delete it only when it keeps state of it (a
// runc process saved at every new start).
func (r *Runtime) removeEarlierRun(cfg *runtime.ContainerConfig) {
	if pid, alive := process.ReadPidFile(filepath.Join(cfg.Dir, monitorPidFile)); alive {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		waitForExit(pid)
	}
	if _, err := os.Stat(filepath.Join(r.opts.Root, cfg.ID)); err == nil {
		_ = r.runc("delete", "--force", cfg.ID).Run()
	}
}

// resetRunFiles removes the records of an earlier run and makes the
// directories the monitor and the log need.
func resetRunFiles(cfg *runtime.ContainerConfig) error {
	for _, f := range []string{runFile, exitFile, monitorPidFile, containerPidFile, filepath.Join(exitDir, cfg.ID)} {
		_ = os.Remove(filepath.Join(cfg.Dir, f))
	}
	for _, d := range []string{exitDir, persistDir, socketDir} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o700); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Dir(cfg.LogPath), 0o700)
}

// startedMonitor is a run's monitor (conmon) under way: its process, the
// pipe it reports the container's creation on, and the end of its wait.
type startedMonitor struct {
	pid   int
	sync  *os.File
	ended <-chan struct{}
}

// startMonitor starts conmon for cfg in a session of its own (signals to
// the agent's group do not reach it, and it outlives the agent); it
// creates the container and reports on the sync pipe.
func (r *Runtime) startMonitor(cfg *runtime.ContainerConfig) (*startedMonitor, error) {
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer syncW.Close()
	monitorLog, err := os.OpenFile(filepath.Join(cfg.Dir, monitorLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		syncR.Close()
		return nil, err
	}
	defer monitorLog.Close()
	cmd := exec.Command(r.opts.Monitor, r.monitorArgs(cfg, r.exitHookArgs(cfg))...)
	cmd.Stdout, cmd.Stderr = monitorLog, monitorLog
	// conmon notes an OOM kill in a file "oom" in its working directory.
	cmd.Dir = cfg.Dir
	cmd.Env = append(os.Environ(), "_OCI_SYNCPIPE=3")
	cmd.ExtraFiles = []*os.File{syncW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		syncR.Close()
		return nil, fmt.Errorf("starting the container's monitor (conmon): %w", err)
	}
	if err := process.WritePidFile(filepath.Join(cfg.Dir, monitorPidFile), cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		syncR.Close()
		return nil, err
	}
	ended := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(ended)
	}()
	return &startedMonitor{pid: cmd.Process.Pid, sync: syncR, ended: ended}, nil
}

// runcStart starts a created container, waiting as awaitStart does.
func (r *Runtime) runcStart(ctx context.Context, id string) error {
	cmd := r.runc("start", id)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("runc start: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	err, waitErr := awaitStart(ctx, done, startTimeout, stopStartGrace, "runc start did not return")
	if waitErr != nil {
		_ = cmd.Process.Kill()
		<-done
		return waitErr
	}
	if err != nil {
		return fmt.Errorf("runc start: %v: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// readLine reads one line from f, waiting as awaitStart does.
func readLine(ctx context.Context, f *os.File, timeout, grace time.Duration) (string, error) {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		l, err := bufio.NewReader(f).ReadString('\n')
		ch <- result{strings.TrimSpace(l), err}
	}()
	res, err := awaitStart(ctx, ch, timeout, grace, "the container did not start")
	if err != nil {
		return "", err
	}
	return res.line, res.err
}

// awaitStart waits for a step of a start to answer on ch, giving up after
// timeout (what says what did not happen). The end of ctx shortens the wait
// to grace instead of abandoning it at once: a start under way when the
// agent stops normally ends within milliseconds, and a container that
// started is then stopped and recorded like any other.
func awaitStart[T any](ctx context.Context, ch <-chan T, timeout, grace time.Duration, what string) (T, error) {
	deadline := time.Now().Add(timeout)
	t := time.NewTimer(timeout)
	defer t.Stop()
	ended := ctx.Done()
	for {
		select {
		case v := <-ch:
			return v, nil
		case <-t.C:
			var zero T
			if ctx.Err() != nil {
				return zero, fmt.Errorf("%w before the container started", ctx.Err())
			}
			return zero, fmt.Errorf("%s within %v", what, timeout)
		case <-ended:
			ended = nil
			t.Reset(min(grace, time.Until(deadline)))
		}
	}
}

// monitorSaid is the end of conmon's own log at path, for an error.
func monitorSaid(path string) string {
	if tail := logfile.Tail(path, 5, 2048); tail != "" {
		return tail
	}
	return "it said nothing (" + path + ")"
}

// stopStartGrace is how long a start under way may still take once the
// agent stops (a variable for tests that abandon starts at every stage).
var stopStartGrace = 5 * time.Second

// abortStart ends a start the agent gave up on (why): the monitor may
// otherwise have the container started later, with nothing to watch or stop
// it. It kills the monitor's process group (runc create and the exit hook
// are in it), removes what runc created, and when the container had started,
// records its end so that the next agent neither adopts it nor runs it again
// as if it never had.
func (r *Runtime) abortStart(monitorPid int, monitorEnded <-chan struct{}, cfg *runtime.ContainerConfig, why error) {
	_ = syscall.Kill(-monitorPid, syscall.SIGKILL) // its own session, so its own group
	<-monitorEnded
	// runc create, killed on its way, may leave the copy of itself it
	// mounts in the container's state directory (runc.XXXX) mounted.
	_ = runtime.UnmountUnder(filepath.Join(r.opts.Root, cfg.ID))
	_ = r.runc("delete", "--force", cfg.ID).Run()
	rec, err := readRun(cfg.Dir)
	if err != nil || rec.Run != cfg.Run {
		return // it never started
	}
	now := time.Now()
	b, _ := json.Marshal(runtime.Exit{Run: cfg.Run, StartedAt: rec.StartedAt, FinishedAt: now, ExitCode: 128 + int32(syscall.SIGKILL),
		Signal: unix.SignalName(syscall.SIGKILL), Message: "killed while the node agent waited for it to start: " + why.Error()})
	if err := atomicfile.WriteFile(filepath.Join(cfg.Dir, exitFile), b, 0o600); err != nil {
		klog.ErrorS(err, "Recording the end of a container whose start was abandoned", "container", cfg.ID)
	}
}

func readRun(dir string) (runRecord, error) {
	var rec runRecord
	b, err := os.ReadFile(filepath.Join(dir, runFile))
	if err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(b, &rec)
}

// Adopt implements runtime.Runtime: a run whose monitor still watches it,
// or one that ended while no agent watched (its exit file tells how).
func (r *Runtime) Adopt(cfg *runtime.ContainerConfig) (runtime.Container, bool) {
	rec, err := readRun(cfg.Dir)
	if err != nil || rec.ID != cfg.ID {
		return nil, false
	}
	c := &container{Ending: runtime.NewEnding(), r: r, id: cfg.ID, dir: cfg.Dir, run: rec.Run, started: rec.StartedAt, stdin: rec.Stdin, tty: rec.TTY, pid: rec.Pid}
	monitor, alive := process.ReadPidFile(filepath.Join(cfg.Dir, monitorPidFile))
	if !alive {
		if _, err := os.Stat(filepath.Join(cfg.Dir, exitFile)); err != nil {
			// The monitor died without recording an end (killed): stop what
			// it left, the run is over.
			_ = r.runc("kill", cfg.ID, "KILL").Run()
			_ = r.runc("delete", "--force", cfg.ID).Run()
		}
		_ = unmountAt(filepath.Join(cfg.Dir, bundleDir, "rootfs"))
		c.finish()
		return c, true
	}
	stopRotating := r.logs.watch(rec.LogPath, filepath.Join(cfg.Dir, bundleDir, "ctl"))
	go func() {
		waitForExit(monitor)
		stopRotating()
		c.finish()
	}()
	return c, true
}

// waitForExit returns when process pid (not the agent's child) has ended.
func waitForExit(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		for {
			if _, ok := process.StartTime(pid); !ok {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	defer unix.Close(fd)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			return
		}
	}
}
