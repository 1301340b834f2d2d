package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/logfile"
)

// errConfig marks a container whose configuration cannot be run here
// (CreateContainerConfigError), as opposed to a start failure.
var errConfig = errors.New("container configuration")

// containerEnv returns the environment of container c of pod: a base PATH,
// then c.Env in order with $(VAR) references expanded and the downward API
// fields the agent knows. Values from Secrets or ConfigMaps are refused.
func containerEnv(pod *corev1.Pod, c *corev1.Container, podIP, hostIP string) ([]string, error) {
	vars := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME": pod.Name}
	order := []string{"PATH", "HOSTNAME"}
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	mapping := expansion.MappingFuncFor(vars)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expansion.Expand(e.Value, mapping))
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath, podIP, hostIP)
			if err != nil {
				return nil, fmt.Errorf("%w: env %s: %v", errConfig, e.Name, err)
			}
			set(e.Name, v)
		default:
			return nil, fmt.Errorf("%w: env %s: values from Secrets, ConfigMaps and resources are not supported by the steadyplane node agent", errConfig, e.Name)
		}
	}
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("%w: envFrom is not supported by the steadyplane node agent", errConfig)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

func fieldValue(pod *corev1.Pod, path, podIP, hostIP string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return podIP, nil
	case "status.hostIP":
		return hostIP, nil
	}
	return "", fmt.Errorf("field %q is not supported", path)
}

// process is one run of a container: a host process in its own process
// group, its output appended to a log file.
type process struct {
	cmd      *exec.Cmd
	logPath  string
	started  time.Time
	done     chan struct{}
	mu       sync.Mutex
	exitCode int32
	finished time.Time
	signal   string
}

// startProcess runs c's command and args with env in c's working directory,
// and records it in pidPath. With dieWithAgent the process gets SIGKILL when
// the agent dies, so that a crash leaves nothing behind.
func startProcess(c *corev1.Container, env []string, logPath, pidPath string, dieWithAgent bool) (*process, error) {
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(c.Command) == 0 {
		return nil, fmt.Errorf("%w: container %s has no command; the steadyplane node agent runs commands on the host and does not read images", errConfig, c.Name)
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, c.WorkingDir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if dieWithAgent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	if st, ok := startTime(cmd.Process.Pid); ok {
		_ = atomicfile.WriteFile(pidPath, []byte(fmt.Sprintf("%d %d\n", cmd.Process.Pid, st)), 0o600)
	}
	p := &process{cmd: cmd, logPath: logPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		killGroupOnExit(cmd.Process.Pid)
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.finished = time.Now()
		p.exitCode = 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.exitCode = 128 + int32(ws.Signal())
				p.signal = ws.Signal().String()
			} else {
				p.exitCode = int32(ee.ExitCode())
			}
		} else if err != nil {
			p.exitCode = 128
		}
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) result() (int32, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitCode, p.finished
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

// stop sends SIGTERM to the process group, and SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
	_ = syscall.Kill(pgid, syscall.SIGKILL) // children left in the group
}

// startTime returns a process's start time in clock ticks since boot (field
// 22 of /proc/<pid>/stat): with the pid, it names one process for good.
func startTime(pid int) (uint64, bool) {
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

// stopLeftover stops the process a pid file names, if it still runs (an
// agent that exited without stopping its containers left it), and removes
// the file. It reports whether there was one.
func stopLeftover(pidPath string, grace time.Duration) bool {
	b, err := os.ReadFile(pidPath)
	if err != nil {
		return false
	}
	defer os.Remove(pidPath)
	var pid int
	var st uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &st); err != nil || pid <= 1 {
		return false
	}
	if now, ok := startTime(pid); !ok || now != st {
		return false // gone, or the pid now names another process
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if now, ok := startTime(pid); !ok || now != st {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return true
}

// terminationMessage reads the container's termination message, as the
// kubelet does: the file at terminationMessagePath (at most 4 KiB), or, with
// FallbackToLogsOnError and a failure, the end of the log.
func terminationMessage(c *corev1.Container, logPath string, exitCode int32) string {
	path := c.TerminationMessagePath
	if path != "" {
		if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() {
			if f, err := os.Open(path); err == nil {
				defer f.Close()
				b, _ := io.ReadAll(io.LimitReader(f, 4096))
				if len(b) > 0 {
					return string(b)
				}
			}
		}
	}
	if c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError && exitCode != 0 {
		return strings.TrimSpace(logfile.Tail(logPath, 80, 2048))
	}
	return ""
}
