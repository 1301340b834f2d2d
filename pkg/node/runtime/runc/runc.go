// Package runc is the node agent's isolating runtime: each container runs
// under runc from an OCI bundle the agent writes, watched by conmon (see
// monitor.go), which outlives the agent, so that a restarted agent adopts
// running containers instead of restarting them. A pod's
// containers share network, IPC and UTS namespaces pinned under the pod's
// directory; each has its own mount and PID namespace.
package runc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/logfile"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/process"
)

// Options configure the runc runtime.
type Options struct {
	// Binary is runc's path; "" looks it up in PATH.
	Binary string
	// Root is runc's state directory (--root), the agent's own.
	Root string
	// Monitor is conmon's path; "" looks it up in PATH.
	Monitor string
	// ExitHook is the command conmon runs when a container has ended: the
	// agent's own binary and the container-exited subcommand.
	ExitHook []string
	// CgroupParent is the cgroup under which containers get theirs.
	CgroupParent string
	// LogMaxSize and LogMaxFiles rotate each run's log (0: the kubelet's
	// defaults, 10 MiB and 5 files).
	LogMaxSize  int64
	LogMaxFiles int
	// LogCheckEvery is how often every running container's log size is
	// checked for rotation besides the checks on writes (0: every 10s, the
	// kubelet's period).
	LogCheckEvery time.Duration
}

// Runtime runs containers under runc.
type Runtime struct {
	opts   Options
	system []HostPath
	logs   *logRotator
}

var _ runtime.Runtime = (*Runtime)(nil)

// Available tells whether runc can be used here: root, a runc binary and
// conmon to watch its containers. It returns runc's path.
func Available() (string, error) {
	if os.Geteuid() != 0 {
		return "", errors.New("the node agent does not run as root")
	}
	p, err := exec.LookPath("runc")
	if err != nil {
		return "", errors.New("runc is not installed (Debian package runc)")
	}
	if _, err := exec.LookPath("conmon"); err != nil {
		return "", errors.New("conmon, the monitor of runc's containers, is not installed (Debian package conmon)")
	}
	return p, nil
}

// Choose decides what --runtime=mode means on this machine (runtime.Choose
// with runc's availability here).
func Choose(mode string) (name, warning string, err error) {
	_, unavailable := Available()
	return runtime.Choose(mode, unavailable)
}

// New returns a runc runtime.
func New(o Options) (*Runtime, error) {
	if o.Binary == "" {
		p, err := Available()
		if err != nil {
			return nil, err
		}
		o.Binary = p
	}
	if o.Monitor == "" {
		p, err := exec.LookPath("conmon")
		if err != nil {
			return nil, errors.New("conmon, the monitor of runc's containers, is not installed (Debian package conmon)")
		}
		o.Monitor = p
	}
	if len(o.ExitHook) == 0 {
		return nil, errors.New("no exit hook command")
	}
	if o.CgroupParent == "" {
		o.CgroupParent = "/steadyplane"
	}
	if o.LogMaxSize <= 0 {
		o.LogMaxSize = crilog.DefaultMaxSize
	}
	if o.LogMaxFiles <= 0 {
		o.LogMaxFiles = crilog.DefaultMaxFiles
	}
	if o.LogCheckEvery <= 0 {
		o.LogCheckEvery = 10 * time.Second
	}
	if err := os.MkdirAll(o.Root, 0o700); err != nil {
		return nil, err
	}
	return &Runtime{opts: o, system: FindSystemDirs(), logs: newLogRotator(o.LogMaxSize, o.LogMaxFiles, o.LogCheckEvery)}, nil
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "runc" }

// Isolated implements runtime.Runtime.
func (r *Runtime) Isolated() bool { return true }

// CreateSandbox implements runtime.Runtime: network (unless hostNetwork),
// IPC and UTS namespaces pinned as files under dir/ns, kept when they exist.
func (r *Runtime) CreateSandbox(id, dir, hostname string, hostNetwork bool) (*runtime.Sandbox, error) {
	nsDir := filepath.Join(dir, "ns")
	if err := os.MkdirAll(nsDir, 0o700); err != nil {
		return nil, err
	}
	s := &runtime.Sandbox{ID: id, Dir: dir, IPCNS: filepath.Join(nsDir, "ipc")}
	kinds := []string{"ipc"}
	if !hostNetwork {
		s.NetNS, s.UTSNS = filepath.Join(nsDir, "net"), filepath.Join(nsDir, "uts")
		kinds = append(kinds, "net", "uts")
	}
	missing := false
	for _, k := range kinds {
		if !isPinned(filepath.Join(nsDir, k)) {
			missing = true
		}
	}
	if !missing {
		return s, nil
	}
	_ = unpin(nsDir) // a half-made sandbox: start it again
	if err := os.MkdirAll(nsDir, 0o700); err != nil {
		return nil, err
	}
	if err := pinNamespaces(nsDir, kinds, hostname); err != nil {
		_ = unpin(nsDir)
		return nil, fmt.Errorf("pod namespaces: %w", err)
	}
	return s, nil
}

// RemoveSandbox implements runtime.Runtime.
func (r *Runtime) RemoveSandbox(s *runtime.Sandbox) error {
	return unpin(filepath.Join(s.Dir, "ns"))
}

// isPinned tells whether path is a namespace file bound there.
func isPinned(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// pinNamespaces makes new namespaces of kinds on a thread of their own and
// binds each to nsDir/<kind>, so that they live without a process. The
// thread is never given back to the Go scheduler: it dies with its goroutine.
func pinNamespaces(nsDir string, kinds []string, hostname string) error {
	flags := map[string]int{"net": unix.CLONE_NEWNET, "ipc": unix.CLONE_NEWIPC, "uts": unix.CLONE_NEWUTS}
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		var f int
		for _, k := range kinds {
			f |= flags[k]
		}
		if err := unix.Unshare(f); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		if f&unix.CLONE_NEWUTS != 0 && hostname != "" {
			if err := unix.Sethostname([]byte(hostname)); err != nil {
				errc <- fmt.Errorf("sethostname: %w", err)
				return
			}
		}
		tid := unix.Gettid()
		for _, k := range kinds {
			p := filepath.Join(nsDir, k)
			fd, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o600)
			if err != nil {
				errc <- err
				return
			}
			fd.Close()
			if err := unix.Mount(fmt.Sprintf("/proc/%d/task/%d/ns/%s", os.Getpid(), tid, k), p, "", unix.MS_BIND, ""); err != nil {
				errc <- fmt.Errorf("pinning the %s namespace: %w", k, err)
				return
			}
		}
		errc <- nil
	}()
	return <-errc
}

// unpin releases every namespace pinned in nsDir and removes it.
func unpin(nsDir string) error {
	entries, err := os.ReadDir(nsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(nsDir, e.Name())
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(nsDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

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
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	system := r.system
	if cfg.Rootfs != nil {
		system = nil // the image is the root; nothing of the host
	}
	spec := Spec(cfg, system, r.cgroupsPath(cfg.ID))
	if err := applySeccomp(spec, cfg.Seccomp, cfg.Privileged); err != nil {
		return nil, err
	}
	bundle := filepath.Join(cfg.Dir, bundleDir)
	rootfs := filepath.Join(bundle, "rootfs")
	// A run the agent found none to adopt (a dead monitor's, or one created
	// but never started when an agent died): gone for good, its monitor
	// first, so that its exit hook cannot delete the run made now.
	if pid, alive := process.ReadPidFile(filepath.Join(cfg.Dir, monitorPidFile)); alive {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		waitForExit(pid)
	}
	_ = r.runc("delete", "--force", cfg.ID).Run()
	if cfg.Rootfs != nil {
		if err := mountImageRootfs(rootfs, cfg.Dir, cfg.Rootfs); err != nil {
			return nil, fmt.Errorf("root filesystem: %w", err)
		}
	}
	started := false
	defer func() {
		if !started && cfg.Rootfs != nil {
			_ = unmountAt(rootfs)
		}
	}()
	if err := prepareRootfs(rootfs, spec, system); err != nil {
		return nil, fmt.Errorf("root filesystem: %w", err)
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
		return nil, err
	}
	for _, f := range []string{runFile, exitFile, monitorPidFile, containerPidFile, filepath.Join(exitDir, cfg.ID)} {
		_ = os.Remove(filepath.Join(cfg.Dir, f))
	}
	for _, d := range []string{exitDir, persistDir, socketDir} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(cfg.LogPath), 0o700); err != nil {
		return nil, err
	}

	syncR, syncW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer syncR.Close()
	monitorLog, err := os.OpenFile(filepath.Join(cfg.Dir, monitorLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		syncW.Close()
		return nil, err
	}
	defer monitorLog.Close()
	cmd := exec.Command(r.opts.Monitor, r.monitorArgs(cfg, r.exitHookArgs(cfg))...)
	cmd.Stdout, cmd.Stderr = monitorLog, monitorLog
	// conmon notes an OOM kill in a file "oom" in its working directory.
	cmd.Dir = cfg.Dir
	cmd.Env = append(os.Environ(), "_OCI_SYNCPIPE=3")
	cmd.ExtraFiles = []*os.File{syncW}
	// Its own session (conmon makes one too): signals to the agent's
	// group do not reach it, and it outlives the agent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		syncW.Close()
		return nil, fmt.Errorf("starting the container's monitor (conmon): %w", err)
	}
	syncW.Close()
	if err := process.WritePidFile(filepath.Join(cfg.Dir, monitorPidFile), cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	c := &container{Ending: runtime.NewEnding(), r: r, id: cfg.ID, dir: cfg.Dir, run: cfg.Run, stdin: cfg.Stdin, tty: cfg.TTY}
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(waited)
	}()
	line, err := readLine(ctx, syncR, startTimeout, stopStartGrace)
	if err != nil && line == "" {
		if errors.Is(err, io.EOF) {
			// conmon ended without a word: its own log says why.
			<-waited
			return nil, fmt.Errorf("the container's monitor ended before the container was created: %s", monitorSaid(filepath.Join(cfg.Dir, monitorLogFile)))
		}
		r.abortStart(cmd.Process.Pid, waited, cfg, err)
		return nil, fmt.Errorf("starting the container: %w", err)
	}
	pid, err := parseSyncMessage(line)
	if err != nil {
		<-waited
		return nil, errors.New(runcError(cfg.Dir, err))
	}
	startedAt := time.Now()
	if err := r.runcStart(ctx, cfg.ID); err != nil {
		r.abortStart(cmd.Process.Pid, waited, cfg, err)
		return nil, err
	}
	rec, _ := json.Marshal(runRecord{Run: cfg.Run, ID: cfg.ID, Pid: pid, StartedAt: startedAt, LogPath: cfg.LogPath, Stdin: cfg.Stdin, TTY: cfg.TTY})
	if err := atomicfile.WriteFile(filepath.Join(cfg.Dir, runFile), rec, 0o600); err != nil {
		r.abortStart(cmd.Process.Pid, waited, cfg, err)
		return nil, err
	}
	started = true // the exit hook takes the root filesystem down when the run ends
	c.started, c.pid = startedAt, pid
	stopRotating := r.logs.watch(cfg.LogPath, filepath.Join(bundle, "ctl"))
	go func() {
		<-waited
		stopRotating()
		c.finish()
	}()
	return c, nil
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

func (r *Runtime) runc(args ...string) *exec.Cmd {
	return exec.Command(r.opts.Binary, append([]string{"--root", r.opts.Root}, args...)...)
}

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

var _ runtime.PIDNamespaced = (*container)(nil)

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
	c.Finish(exit)
}

func (c *container) ID() string           { return "runc://" + c.id }
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

// KillAll kills and deletes every container runc keeps state of under
// root (a node's --root-dir/runc): what a node killed without stopping its
// pods left running. It returns the containers' ids.
func KillAll(binary, root string) ([]string, error) {
	if binary == "" {
		binary = "runc"
	}
	out, err := exec.Command(binary, "--root", root, "list", "-q").Output()
	if err != nil {
		if _, statErr := os.Stat(root); os.IsNotExist(statErr) {
			return nil, nil
		}
		return nil, fmt.Errorf("runc list: %w", err)
	}
	ids := strings.Fields(string(out))
	var errs []error
	for _, id := range ids {
		_ = exec.Command(binary, "--root", root, "kill", id, "KILL").Run()
		if out, err := exec.Command(binary, "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("runc delete %s: %v: %s", id, err, out))
		}
	}
	return ids, errors.Join(errs...)
}

var _ runtime.Resizable = (*container)(nil)

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
