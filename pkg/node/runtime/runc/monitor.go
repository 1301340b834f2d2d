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
	"strconv"
	"strings"
	"time"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// Each container is watched by conmon, CRI-O's monitor (Debian's package):
// it runs `runc create` with the container's output going through pipes
// into the CRI-format log, waits for the container's end, writes its exit
// code and then runs the exit hook, a short run of steadyplane's own binary
// that records the end the way the agent reads it and deletes the
// container. conmon outlives the agent, so that a restarted agent adopts the
// container instead of restarting it. It was chosen over a monitor of our
// own because a resident copy of steadyplane's binary costs ~15 MiB of
// private memory per container and conmon ~0.4 MiB (docs/pods.md has the
// figures); it is what CRI-O runs in production.

// ExitHookUsage says what the container-exited command does.
const ExitHookUsage = `Record the end of one runc container (run by conmon, the container's monitor, when the
container has ended; not by hand): read the exit code conmon wrote, whether the memory limit
killed it, write the end where the node agent reads it, delete the container from runc and
unmount its root filesystem.`

// monitorArgs are conmon's arguments for cfg's run: a monitor that stays
// our child (--sync, so that the agent waits for it like any child), logs
// in the CRI format (the agent rotates the log, see logs.go), and runs hook
// when the container has ended.
func (r *Runtime) monitorArgs(cfg *runtime.ContainerConfig, hook []string) []string {
	bundle := filepath.Join(cfg.Dir, bundleDir)
	args := []string{
		"--api-version", "1", "--sync",
		"--cid", cfg.ID, "--cuuid", cfg.ID, "--name", cfg.ID,
		"--runtime", r.opts.Binary,
		"--runtime-arg", "--root=" + r.opts.Root,
		"--runtime-arg", "--log=" + filepath.Join(cfg.Dir, runcLogFile),
		"--runtime-arg", "--log-format=json",
		"--bundle", bundle,
		"--container-pidfile", filepath.Join(cfg.Dir, containerPidFile),
		"--log-path", "k8s-file:" + cfg.LogPath,
		"--exit-dir", filepath.Join(cfg.Dir, exitDir),
		"--persist-dir", filepath.Join(cfg.Dir, persistDir),
		"--socket-dir-path", filepath.Join(cfg.Dir, socketDir),
		"--exit-command", hook[0],
	}
	if cfg.TTY {
		args = append(args, "--terminal")
	}
	if cfg.Stdin {
		args = append(args, "--stdin")
		if !cfg.StdinOnce {
			args = append(args, "--leave-stdin-open")
		}
	}
	for _, a := range hook[1:] {
		args = append(args, "--exit-command-arg", a)
	}
	return args
}

// exitHookArgs are the exit hook's arguments for cfg's run.
func (r *Runtime) exitHookArgs(cfg *runtime.ContainerConfig) []string {
	return append(append([]string{}, r.opts.ExitHook...),
		"--runc="+r.opts.Binary, "--root="+r.opts.Root, "--id="+cfg.ID, "--dir="+cfg.Dir,
		"--run="+strconv.Itoa(int(cfg.Run)), "--cgroup="+r.cgroupsPath(cfg.ID))
}

// syncMessage is what conmon says on its sync pipe once `runc create` is
// done: the container's pid, or -1 and runc's error output.
type syncMessage struct {
	Data    int    `json:"data"`
	Message string `json:"message"`
}

// parseSyncMessage reads conmon's line; a failed create names runc's error.
func parseSyncMessage(line string) (int, error) {
	var m syncMessage
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return 0, fmt.Errorf("conmon's answer %q: %w", line, err)
	}
	if m.Data <= 0 {
		msg := strings.TrimSpace(m.Message)
		if msg == "" {
			msg = "runc create failed"
		}
		return 0, errors.New(msg)
	}
	return m.Data, nil
}

// ExitHookMain runs the exit hook with the command-line arguments args and
// returns its exit code.
func ExitHookMain(args []string) int {
	fs := flag.NewFlagSet("container-exited", flag.ContinueOnError)
	runcBin := fs.String("runc", "runc", "runc binary")
	root := fs.String("root", "", "runc state directory")
	id := fs.String("id", "", "container id")
	dir := fs.String("dir", "", "container directory (bundle, run and exit files)")
	run := fs.Int("run", 0, "run number")
	cgroup := fs.String("cgroup", "", "the container's cgroup path (for the OOM count)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *id == "" || *dir == "" || *root == "" {
		fmt.Fprintln(os.Stderr, "container-exited: --id, --dir and --root are required")
		return 2
	}
	if err := recordExit(*runcBin, *root, *id, *dir, int32(*run), *cgroup); err != nil {
		fmt.Fprintf(os.Stderr, "container-exited %s: %v\n", *id, err)
		return 1
	}
	return 0
}

// recordExit is the exit hook: run's end as conmon saw it, recorded for the
// agent; then runc forgets the container and its root filesystem goes. A
// newer run of the same container (its record names another run) is left
// alone: the hook of an old monitor must not delete it.
func recordExit(runcBin, root, id, dir string, run int32, cgroup string) error {
	rec, err := readRun(dir)
	if err == nil && rec.Run != run {
		return nil
	}
	exit := runtime.Exit{Run: run, StartedAt: rec.StartedAt, FinishedAt: time.Now(), ExitCode: 255}
	codeFile := filepath.Join(dir, exitDir, id)
	if b, err := os.ReadFile(codeFile); err == nil {
		if st, err := os.Stat(codeFile); err == nil {
			exit.FinishedAt = st.ModTime()
		}
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 {
			exit.ExitCode = int32(n)
		} else {
			exit.Message = "the container's monitor recorded no exit code (" + strings.TrimSpace(string(b)) + ")"
		}
	} else {
		exit.Message = "the container's monitor recorded no exit code"
	}
	exit.OOMKilled = cgroupOOMKilled(cgroup)
	b, _ := json.Marshal(exit)
	var errs []error
	if err := atomicfile.WriteFile(filepath.Join(dir, exitFile), b, 0o600); err != nil {
		errs = append(errs, fmt.Errorf("recording the exit: %w", err))
	}
	cmd := exec.Command(runcBin, "--root", root, "delete", "--force", id)
	if out, err := cmd.CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("runc delete: %v: %s", err, out))
	}
	// An image's root filesystem lives as long as the run.
	if err := unmountAt(filepath.Join(dir, bundleDir, "rootfs")); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// runcError returns the last error runc logged in dir, or err.
func runcError(dir string, err error) string {
	f, ferr := os.Open(filepath.Join(dir, runcLogFile))
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

// cgroupOOMKilled tells whether the kernel's OOM killer acted in the
// container's cgroup (memory.events on cgroup v2, memory.oom_control on
// v1), read before runc deletes the cgroup.
func cgroupOOMKilled(cgroup string) bool {
	if cgroup == "" {
		return false
	}
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup", cgroup, "memory.events"),
		filepath.Join("/sys/fs/cgroup/memory", cgroup, "memory.oom_control"),
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
	n, ok := statField(path, "oom_kill")
	return int(n), ok
}
