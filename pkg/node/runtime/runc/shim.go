package runc

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/process"
)

// ShimUsage says what the container-shim command does.
const ShimUsage = `Watch one container run under runc (started by the node agent, not by hand): create and
start it, copy its output into its log in the CRI format, wait for its end, record the exit
code, signal and whether the memory limit killed it, then delete it. The shim outlives the
node agent, so that a restarted agent adopts the container instead of restarting it.`

// ShimMain runs the container shim with the command-line arguments args.
// It tells the agent "started <pid>" or "failed <message>" on file
// descriptor 3, and returns the shim's exit code.
func ShimMain(args []string) int {
	fs := flag.NewFlagSet("container-shim", flag.ContinueOnError)
	runcBin := fs.String("runc", "runc", "runc binary")
	root := fs.String("root", "", "runc state directory")
	id := fs.String("id", "", "container id")
	dir := fs.String("dir", "", "container directory (bundle, run and exit files)")
	logPath := fs.String("log", "", "container log (CRI format)")
	run := fs.Int("run", 0, "run number")
	cgroup := fs.String("cgroup", "", "the container's cgroup path (for the OOM count)")
	logMaxSize := fs.Int64("log-max-size", crilog.DefaultMaxSize, "bytes after which the log is rotated")
	logMaxFiles := fs.Int("log-max-files", crilog.DefaultMaxFiles, "log files kept, the current one included")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *id == "" || *dir == "" || *logPath == "" || *root == "" {
		fmt.Fprintln(os.Stderr, "container-shim: --id, --dir, --log and --root are required")
		return 2
	}
	ready := os.NewFile(3, "ready")
	tell := func(format string, a ...any) {
		if ready != nil {
			fmt.Fprintf(ready, format+"\n", a...)
			ready.Close()
			ready = nil
		}
	}
	s := &shim{runc: *runcBin, root: *root, id: *id, dir: *dir, run: int32(*run), cgroup: *cgroup, logMaxSize: *logMaxSize, logMaxFiles: *logMaxFiles}
	pid, copies, err := s.start(*logPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "container-shim %s: %v\n", *id, err)
		tell("failed %s", strings.ReplaceAll(err.Error(), "\n", " "))
		_ = s.runcCmd("delete", "--force", s.id).Run()
		return 1
	}
	tell("started %d", pid)
	// The shim lives as long as its container, one per container: give back
	// what starting it (and the binary's package initialisation) left.
	debug.FreeOSMemory()
	exit := s.wait(pid)
	copies.Wait()
	exit.Run, exit.OOMKilled = s.run, s.oomKilled()
	if rec, err := readRun(s.dir); err == nil {
		exit.StartedAt = rec.StartedAt
	}
	b, _ := json.Marshal(exit)
	if err := atomicfile.WriteFile(filepath.Join(s.dir, exitFile), b, 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "container-shim %s: recording the exit: %v\n", s.id, err)
	}
	if out, err := s.runcCmd("delete", "--force", s.id).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "container-shim %s: runc delete: %v: %s\n", s.id, err, out)
	}
	// An image's root filesystem lives as long as the run.
	if err := unmountAt(filepath.Join(s.dir, bundleDir, "rootfs")); err != nil {
		fmt.Fprintf(os.Stderr, "container-shim %s: %v\n", s.id, err)
	}
	return 0
}

type shim struct {
	runc, root, id, dir, cgroup string
	run                         int32
	logMaxSize                  int64
	logMaxFiles                 int
}

func (s *shim) runcCmd(args ...string) *exec.Cmd {
	return exec.Command(s.runc, append([]string{"--root", s.root, "--log", filepath.Join(s.dir, runcLogFile), "--log-format", "json"}, args...)...)
}

// start creates and starts the container with its output going through
// pipes into the log; it returns the container's pid.
func (s *shim) start(logPath string) (int, *sync.WaitGroup, error) {
	// Orphans of the container (its init, once runc create exits) become
	// the shim's children, so that it can wait for them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, nil, fmt.Errorf("subreaper: %w", err)
	}
	if err := process.WritePidFile(filepath.Join(s.dir, shimPidFile), os.Getpid()); err != nil {
		return 0, nil, err
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return 0, nil, err
	}
	logFile, err := crilog.OpenRotating(logPath, s.logMaxSize, s.logMaxFiles)
	if err != nil {
		return 0, nil, err
	}
	log := crilog.NewFile(logFile)
	outR, outW, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	copies := &sync.WaitGroup{}
	copies.Add(2)
	go func() { defer copies.Done(); crilog.Copy(log, "stdout", outR) }()
	go func() { defer copies.Done(); crilog.Copy(log, "stderr", errR) }()
	go func() { copies.Wait(); logFile.Close() }()

	pidFile := filepath.Join(s.dir, "container.pid")
	_ = os.Remove(filepath.Join(s.dir, runcLogFile))
	create := s.runcCmd("create", "--bundle", filepath.Join(s.dir, bundleDir), "--pid-file", pidFile, s.id)
	// Pass-through stdio: the container's init inherits runc's.
	create.Stdout, create.Stderr = outW, errW
	err = create.Run()
	outW.Close()
	errW.Close()
	if err != nil {
		return 0, copies, fmt.Errorf("runc create: %s", s.runcError(err))
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, copies, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, copies, fmt.Errorf("runc's pid file: %w", err)
	}
	started := time.Now()
	if out, err := s.runcCmd("start", s.id).CombinedOutput(); err != nil {
		return 0, copies, fmt.Errorf("runc start: %s%s", s.runcError(err), out)
	}
	rec, _ := json.Marshal(runRecord{Run: s.run, ID: s.id, Pid: pid, StartedAt: started})
	if err := atomicfile.WriteFile(filepath.Join(s.dir, runFile), rec, 0o600); err != nil {
		return 0, copies, err
	}
	return pid, copies, nil
}

// runcError returns the last error runc logged, or err.
func (s *shim) runcError(err error) string {
	f, ferr := os.Open(filepath.Join(s.dir, runcLogFile))
	if ferr != nil {
		return err.Error()
	}
	defer f.Close()
	msg := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var entry struct{ Level, Msg string }
		if json.Unmarshal(sc.Bytes(), &entry) == nil && (entry.Level == "error" || entry.Level == "fatal") {
			msg = entry.Msg
		}
	}
	if msg == "" {
		return err.Error()
	}
	return msg
}

// wait reaps children until the container's init has ended, and returns
// how it ended.
func (s *shim) wait(pid int) runtime.Exit {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return runtime.Exit{ExitCode: 255, FinishedAt: time.Now(), Message: "waiting for the container: " + err.Error()}
		}
		if got != pid {
			continue
		}
		e := runtime.Exit{FinishedAt: time.Now()}
		if ws.Signaled() {
			e.ExitCode, e.Signal = 128+int32(ws.Signal()), unix.SignalName(ws.Signal())
		} else {
			e.ExitCode = int32(ws.ExitStatus())
		}
		return e
	}
}

// oomKilled tells whether the kernel's OOM killer acted in the container's
// cgroup (memory.events on cgroup v2, memory.oom_control on v1).
func (s *shim) oomKilled() bool {
	if s.cgroup == "" {
		return false
	}
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup", s.cgroup, "memory.events"),
		filepath.Join("/sys/fs/cgroup/memory", s.cgroup, "memory.oom_control"),
	} {
		if n, ok := OOMKills(p); ok {
			return n > 0
		}
	}
	return false
}

// OOMKills reads the oom_kill count of a cgroup's memory.events (v2) or
// memory.oom_control (v1) file.
func OOMKills(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			n, err := strconv.Atoi(f[1])
			return n, err == nil
		}
	}
	return 0, false
}
