package testenv

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/pkg/node/podnet"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// UpPorts is how many free loopback ports UpArgs takes.
const UpPorts = 11

// UpArgs is the argument list of "steadyplane up" with its data in dataDir,
// every listener on one of ports (FreePorts(UpPorts)), and a pod range
// (10.<octet>.<n>.0/24) and CNI bridge (<bridgePrefix><ports[0]>) of the
// run's own, so that test packages and benchmarks running at once do not
// meet. cleanup ends what the run's node agent left (pods, mounts) and
// removes the bridge; it is for after up has stopped.
func UpArgs(dataDir string, ports []int, octet int, bridgePrefix string, extra ...string) (args []string, cleanup func()) {
	bridge := fmt.Sprintf("%s%d", bridgePrefix, ports[0])
	podCIDR, release := claimPodRange(octet, ports[0]%250, bridge)
	// The node's resolver file names no server: CoreDNS forwards nothing
	// off the machine (names outside the cluster fail at once).
	resolv := filepath.Join(filepath.Dir(dataDir), "resolv.conf")
	_ = os.MkdirAll(filepath.Dir(resolv), 0o700)
	_ = os.WriteFile(resolv, []byte("# steadyplane tests: no nameserver, nothing resolved off the machine\n"), 0o644)
	args = []string{"up",
		"--data-dir", dataDir,
		"--apiserver-port", strconv.Itoa(ports[0]),
		"--etcd-client-port", strconv.Itoa(ports[1]),
		"--etcd-peer-port", strconv.Itoa(ports[2]),
		"--node-metrics-port", strconv.Itoa(ports[3]),
		"--readiness-webhook-port", strconv.Itoa(ports[4]),
		"--node-api-port", strconv.Itoa(ports[5]),
		"--controller-manager-port", strconv.Itoa(ports[6]),
		"--scheduler-port", strconv.Itoa(ports[7]),
		"--operator-metrics-port", strconv.Itoa(ports[8]),
		"--proxy-healthz-port", strconv.Itoa(ports[9]),
		"--proxy-metrics-port", strconv.Itoa(ports[10]),
		"--pod-cidr", podCIDR,
		"--cluster-cidr", podCIDR,
		"--cni-bridge", bridge,
		"--resolv-conf", resolv,
	}
	return append(args, extra...), func() {
		defer release()
		CleanNode(filepath.Join(dataDir, "node"))
		_ = exec.Command("ip", "link", "del", bridge).Run()
		// A stopped kube-proxy leaves its rules, which DNAT to pods
		// that are gone: "steadyplane cleanup" removes them (and what
		// else the run left).
		if bin, err := Binary(); err == nil && os.Geteuid() == 0 {
			_ = exec.Command(bin, "cleanup", "--data-dir", dataDir, "--cni-bridge", bridge).Run()
		}
	}
}

// UpRun is a "steadyplane up" a benchmark started, and when its progress
// lines came.
type UpRun struct {
	cmd *exec.Cmd
	// APIReady and AllReady are the times from the start to "apiserver
	// ready in" and to "steadyplane is up".
	APIReady, AllReady time.Duration
	// APIReadyOutside is the time from the start to the first 200 of the
	// API server's /readyz to a client of the admin kubeconfig polling it
	// every 50ms (0 when the arguments name no data directory or port).
	APIReadyOutside time.Duration
	// Steps are up's progress lines, each with the time it came.
	Steps []UpStep
}

// UpStep is one progress line of up and when it came.
type UpStep struct {
	Line string
	At   time.Duration
}

// Name is what a progress line that reports a duration says is done
// ("etcd ready" of "etcd ready in 0.6s (...)"), or "" for another line.
func (s UpStep) Name() string {
	if m := doneIn.FindStringSubmatch(s.Line); m != nil {
		return m[1]
	}
	return ""
}

// doneIn matches up's lines that report a step done and its duration.
var doneIn = regexp.MustCompile(`^(\S.*?) in [0-9.]+s\b`)

// Pid is up's process id.
func (u *UpRun) Pid() int { return u.cmd.Process.Pid }

// Cmd is up's command, to kill or wait for.
func (u *UpRun) Cmd() *exec.Cmd { return u.cmd }

// StartUp runs bin with args (UpArgs) and returns once it says it is up;
// its further output is read and dropped.
func StartUp(ctx context.Context, bin string, args []string) (*UpRun, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	u := &UpRun{cmd: cmd}
	readyz := make(chan time.Duration, 1)
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	go func() {
		readyz <- pollReadyz(pollCtx, argValue(args, "--data-dir"), argValue(args, "--apiserver-port"), start)
	}()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		u.Steps = append(u.Steps, UpStep{Line: line, At: time.Since(start)})
		switch {
		case strings.HasPrefix(line, "apiserver ready in"):
			u.APIReady = time.Since(start)
		case strings.Contains(line, "steadyplane is up"):
			u.AllReady = time.Since(start)
			go func() {
				for sc.Scan() {
				}
			}()
			select {
			case u.APIReadyOutside = <-readyz:
			case <-time.After(10 * time.Second):
			}
			return u, nil
		}
	}
	err = cmd.Wait()
	// Its last words say why.
	last := u.Steps[max(0, len(u.Steps)-15):]
	lines := make([]string, len(last))
	for i, st := range last {
		lines[i] = st.Line
	}
	return nil, fmt.Errorf("up exited before it was up (%v); its last lines:\n%s", err, strings.Join(lines, "\n"))
}

// argValue is the value of flag name in args ("--name value"), or "".
func argValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// pollReadyz asks https://127.0.0.1:port/readyz every 50ms, as a client of
// dataDir's admin kubeconfig once that exists, and returns the time since
// start of the first 200 (0 if ctx ends first or nothing names them).
func pollReadyz(ctx context.Context, dataDir, port string, start time.Time) time.Duration {
	if dataDir == "" || port == "" {
		return 0
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var client *http.Client
	for {
		if client == nil {
			if cfg, err := clientcmd.BuildConfigFromFlags("https://127.0.0.1:"+port, filepath.Join(dataDir, "admin.kubeconfig")); err == nil {
				cfg.Timeout = time.Second
				client, _ = rest.HTTPClientFor(cfg)
			}
		}
		if client != nil {
			if resp, err := client.Get("https://127.0.0.1:" + port + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return time.Since(start)
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
		}
	}
}

// Wait waits for up to exit by itself.
func (u *UpRun) Wait() error { return u.cmd.Wait() }

// Stop sends SIGTERM, as Ctrl-C would, and waits for up to exit.
func (u *UpRun) Stop() {
	_ = u.cmd.Process.Signal(syscall.SIGTERM)
	_ = u.cmd.Wait()
}

// BenchUp is a benchmark's "up": a data directory <work>/.steadyplane in a
// new temporary directory, its arguments (UpArgs) and ports.
type BenchUp struct {
	DataDir string
	Args    []string
	Ports   []int
	cleanup func()
	work    string
}

// NewBenchUp prepares a benchmark's "up" (UpArgs's octet, bridgePrefix and
// extra); Cleanup ends what it left and removes the directory.
func NewBenchUp(name string, octet int, bridgePrefix string, extra ...string) (*BenchUp, error) {
	ports, err := FreePorts(UpPorts)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "steadyplane-bench-"+name+"-")
	if err != nil {
		return nil, err
	}
	b := &BenchUp{DataDir: filepath.Join(work, ".steadyplane"), Ports: ports, work: work}
	b.Args, b.cleanup = UpArgs(b.DataDir, ports, octet, bridgePrefix, extra...)
	return b, nil
}

// Cleanup ends what the run left (UpArgs's cleanup) and removes its
// directory.
func (b *BenchUp) Cleanup() {
	b.cleanup()
	os.RemoveAll(b.work)
}

var (
	claimsMu sync.Mutex
	// claims are this process's pod ranges, by the bridge of their run.
	claims = map[string]string{}
)

// claimPodRange picks a 10.<octet>.<n>.0/24, trying n from first on, that no
// route of the machine uses (but bridge's own, from an earlier run) and no
// other test process holds, and holds it until release. Two runs whose first
// ports differ by a multiple of 250 would otherwise get the same range, and
// the later up refuses it. The hold is an flock, so a test process that dies
// gives its ranges back.
func claimPodRange(octet, first int, bridge string) (cidr string, release func()) {
	claimsMu.Lock()
	defer claimsMu.Unlock()
	// The same run started again (a restart test) keeps its range: a
	// second flock of this process on the file would fail.
	if c, ok := claims[bridge]; ok {
		return c, func() {}
	}
	routes, _ := podnet.HostRoutes()
	for i := 0; i < 250; i++ {
		n := (first + i) % 250
		cidr = fmt.Sprintf("10.%d.%d.0/24", octet, n)
		if podnet.CheckFree(cidr, routes, bridge) != nil {
			continue
		}
		lock, err := os.OpenFile(fmt.Sprintf("%s/steadyplane-podrange-%d-%d.lock", os.TempDir(), octet, n), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			break
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			lock.Close()
			continue
		}
		claims[bridge] = cidr
		return cidr, func() {
			claimsMu.Lock()
			defer claimsMu.Unlock()
			delete(claims, bridge)
			lock.Close()
		}
	}
	// Nothing free (or no temporary directory): the first choice, which up
	// checks and refuses with a clear error if it is taken.
	return fmt.Sprintf("10.%d.%d.0/24", octet, first), func() {}
}

// StopProcess sends p SIGTERM, as a service manager stops a service, and
// SIGKILL when it has not ended within grace; it returns once p has ended
// (a zombie counts as ended: whoever started p reaps it).
func StopProcess(p *os.Process, grace time.Duration) {
	_ = p.Signal(syscall.SIGTERM)
	if waitEnded(p.Pid, grace) {
		return
	}
	_ = p.Kill()
	waitEnded(p.Pid, 10*time.Second)
}

// waitEnded polls until process pid has ended, up to timeout.
func waitEnded(pid int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !procfs.Running(pid) {
			return true
		}
	}
	return !procfs.Running(pid)
}
