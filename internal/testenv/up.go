package testenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/steadyplane/steadyplane/pkg/node/podnet"
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
}

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
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "apiserver ready in"):
			u.APIReady = time.Since(start)
		case strings.Contains(line, "steadyplane is up"):
			u.AllReady = time.Since(start)
			go func() {
				for sc.Scan() {
				}
			}()
			return u, nil
		}
	}
	_ = cmd.Wait()
	return nil, fmt.Errorf("up exited before it was up")
}

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
