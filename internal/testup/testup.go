// Package testup runs "steadyplane up" for the end-to-end test packages as a
// user runs it: the binary, free loopback ports, a pod range and bridge of
// the run's own, and the README's walkthroughs verbatim.
package testup

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// ServiceCIDR is up's default service range, which the walkthroughs use.
const ServiceCIDR = "10.96.0.0/16"

// Up is a running "steadyplane up".
type Up struct {
	cmd    *exec.Cmd
	args   []string
	mu     sync.Mutex
	output []string
	upCh   chan struct{}
	done   chan struct{}
}

// Start runs "steadyplane up" on ports (Setup's) with extra flags; the
// test's cleanup kills it if it still runs and removes its pods and bridge.
func Start(t *testing.T, bin, dataDir string, ports []int, extra ...string) *Up {
	t.Helper()
	// A pod range and bridge of this run's own (other test packages run at once).
	args, cleanup := testenv.UpArgs(dataDir, ports, 246, "spe", extra...)
	t.Cleanup(cleanup)
	return StartCommand(t, "up", bin, args...)
}

// StartCommand runs a "steadyplane up" given as a whole command line (on
// a test host: Network.NSEnter), logging its output with prefix; the
// test's cleanup kills it if it still runs.
func StartCommand(t *testing.T, prefix, name string, args ...string) *Up {
	t.Helper()
	return StartCmd(t, prefix, exec.Command(name, args...))
}

// StartCmd is StartCommand for a command prepared by the caller (its
// working directory or environment); its output must not be set.
func StartCmd(t *testing.T, prefix string, cmd *exec.Cmd) *Up {
	t.Helper()
	args := cmd.Args[1:]
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Up{cmd: cmd, args: args, upCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		upSeen := false
		for sc.Scan() {
			line := sc.Text()
			t.Logf("%s: %s", prefix, line)
			p.mu.Lock()
			p.output = append(p.output, line)
			p.mu.Unlock()
			if !upSeen && strings.Contains(line, "steadyplane is up") {
				upSeen = true
				close(p.upCh)
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// WaitUp waits until up says it is up, failing the test otherwise.
func (p *Up) WaitUp(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.upCh:
	case <-p.done:
		t.Fatalf("steadyplane up exited before it was up:\n%s", p.Text())
	case <-time.After(timeout):
		t.Fatalf("steadyplane up not up after %v:\n%s", timeout, p.Text())
	}
}

// WaitText waits until up's output holds text, failing the test
// otherwise.
func (p *Up) WaitText(t *testing.T, text string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !strings.Contains(p.Text(), text); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("steadyplane up did not say %q within %v:\n%s", text, timeout, p.Text())
		}
	}
}

// Done is closed once up has exited.
func (p *Up) Done() <-chan struct{} { return p.done }

// Flag returns the value up was given for --name, or "".
func (p *Up) Flag(name string) string {
	for i, a := range p.args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(p.args) {
			return p.args[i+1]
		}
	}
	return ""
}

// Kill kills up with SIGKILL, as a crash or an OOM kill would, and waits
// for it: what it started is left as it is.
func (p *Up) Kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// Text is up's output so far.
func (p *Up) Text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.output, "\n")
}

// Args are the command's arguments after the binary: up's flags, to run
// it again (or once with more flags) as it was started.
func (p *Up) Args() []string { return append([]string(nil), p.args...) }

// Stop sends SIGTERM, as Ctrl-C or a service manager would, and waits.
func (p *Up) Stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("steadyplane up did not stop within 90s after SIGTERM:\n%s", p.Text())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("steadyplane up exited with %d after SIGTERM", code)
	}
}

// stopIfRunning is Stop for an up that may have been stopped already.
func (p *Up) stopIfRunning(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
	default:
		p.Stop(t)
	}
}

// Kubectl runs kubectl with the kubeconfig and returns its combined output.
func Kubectl(t *testing.T, ctx context.Context, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	bin, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig, "--request-timeout=30s"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ComponentPid is the process of the control-plane component dataDir's
// installed binary runs with subcommand (e.g. "scheduler"), 0 when none
// runs.
func ComponentPid(dataDir, subcommand string) int {
	pids := procfs.Find(func(argv []string) bool {
		return len(argv) > 1 && strings.HasPrefix(argv[0], filepath.Join(dataDir, "bin")+"/") && argv[1] == subcommand
	})
	if len(pids) == 0 {
		return 0
	}
	return pids[0]
}

// KillComponent kills -9 the component's process (ComponentPid), as a
// crash would, and returns its pid. It waits up to a minute for one to
// run (the node agent may be restarting it); one that exits between being
// found and the kill is found again.
func KillComponent(t *testing.T, dataDir, subcommand string) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		pid := ComponentPid(dataDir, subcommand)
		if pid == 0 {
			continue
		}
		err := syscall.Kill(pid, syscall.SIGKILL)
		if err == nil {
			return pid
		}
		if !errors.Is(err, syscall.ESRCH) {
			t.Fatal(err)
		}
	}
	t.Fatalf("%s process not found (and killed) within a minute", subcommand)
	return 0
}

// ChildPids lists processes whose command line mentions dataDir: the children
// "up" started from it.
func ChildPids(dataDir string) []int {
	return procfs.Find(func(argv []string) bool { return strings.Contains(strings.Join(argv, "\x00"), dataDir) })
}

// Setup skips in -short mode and returns the binary, a fresh data directory,
// three free loopback ports and a context bounded by timeout.
func Setup(t *testing.T, timeout time.Duration) (bin, dataDir string, ports []int, ctx context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs steadyplane up")
	}
	bin, err := testenv.Binary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	ports, err = testenv.FreePorts(testenv.UpPorts)
	if err != nil {
		t.Fatal(err)
	}
	return bin, filepath.Join(t.TempDir(), "sp"), ports, ctx
}

// ReadmeBlock returns the first sh block of the README's section heading.
func ReadmeBlock(t *testing.T, heading string) string {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## "+heading)
	if !ok {
		t.Fatalf("README has no section %q", heading)
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatalf("README's section %q has no sh block", heading)
	}
	return block
}

// StartWalkthrough starts "up" with its data in <work>/.steadyplane, where
// the README's walkthroughs expect it, and returns the context, the data
// directory and a function that runs a bash script in <work> with kubectl on
// the PATH and returns its output, failing the test if the script fails.
func StartWalkthrough(t *testing.T, timeout time.Duration, upArgs ...string) (context.Context, string, func(name, script string) string) {
	t.Helper()
	ctx, dataDir, run, _ := StartRestartableWalkthrough(t, timeout, upArgs...)
	return ctx, dataDir, run
}

// StartRestartableWalkthrough is StartWalkthrough, and a function that
// stops up and starts it again on the same data directory, as a user
// restarts it, waiting until it is up.
func StartRestartableWalkthrough(t *testing.T, timeout time.Duration, upArgs ...string) (context.Context, string, func(name, script string) string, func()) {
	t.Helper()
	bin, dataDir, ports, ctx := Setup(t, timeout)
	work := filepath.Dir(dataDir)
	dataDir = filepath.Join(work, ".steadyplane")
	// The walkthroughs run busybox:1.36; offline, it comes as an archive
	// dropped where up imports images at start.
	testimage.RequireBusybox(t)
	if err := testimage.BusyboxArchive(filepath.Join(dataDir, "images", "busybox.tar")); err != nil {
		t.Fatal(err)
	}
	// The walkthroughs reach Services: what kube-proxy did not rewrite
	// must not leave the machine.
	undrop, err := testenv.DropServiceRange(ServiceCIDR)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(undrop)
	up := Start(t, bin, dataDir, ports, upArgs...)
	up.WaitUp(t, 4*time.Minute)
	t.Cleanup(func() { up.stopIfRunning(t) })
	k, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	restart := func() {
		t.Helper()
		up.Stop(t)
		up = Start(t, bin, dataDir, ports, upArgs...)
		up.WaitUp(t, 4*time.Minute)
		// Start's own cleanup (a kill) runs before the one above: stop
		// this up first, as a user would.
		again := up
		t.Cleanup(func() { again.stopIfRunning(t) })
	}
	return ctx, dataDir, func(name, script string) string {
		t.Helper()
		return RunScript(t, ctx, name, work, script, filepath.Dir(k))
	}, restart
}

// RunScript runs a walkthrough's bash script in dir, with pathDirs first
// on the PATH, and returns its output, failing the test if it fails.
func RunScript(t *testing.T, ctx context.Context, name, dir, script string, pathDirs ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+strings.Join(append(pathDirs, os.Getenv("PATH")), ":"))
	out, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", name, out)
	if err != nil {
		t.Fatalf("%s failed: %v", name, err)
	}
	return string(out)
}

// KeepLogs copies a failed test's server logs (up's components and the
// static pods' containers) to $TMPDIR/steadyplane-e2e-ha/<name>, which the
// test's temporary directory does not outlive.
func KeepLogs(t *testing.T, name, dataDir string) {
	if !t.Failed() {
		return
	}
	dst := filepath.Join(os.TempDir(), "steadyplane-e2e-ha", name)
	_ = os.RemoveAll(dst)
	_ = filepath.WalkDir(dataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return nil
		}
		rel, _ := filepath.Rel(dataDir, path)
		if b, err := os.ReadFile(path); err == nil {
			_ = os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o700)
			_ = os.WriteFile(filepath.Join(dst, rel), b, 0o600)
		}
		return nil
	})
	t.Logf("%s's logs: %s", name, dst)
}

// HAClient is a client-go clientset from kubeconfig with steadyplane's
// client options (failover between the servers it lists).
func HAClient(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// WaitFor polls check every second until it holds, failing the test after timeout.
func WaitFor(t *testing.T, ctx context.Context, timeout time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ok, status := check()
		if ok {
			return
		}
		last = status
		time.Sleep(time.Second)
	}
	t.Fatalf("waited %v for %s: %s", timeout, what, last)
}
