// Package e2e runs whole-system scenarios: the steadyplane binary as a user
// runs it, and kubectl as the client.
package e2e

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
	"testing"
	"time"

	"github.com/steadyplane/steadyplane/internal/procfs"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/client/altsvc"
)

// upProcess is a running "steadyplane up".
type upProcess struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	output []string
	upCh   chan struct{}
	done   chan struct{}
}

func startUp(t *testing.T, bin, dataDir string, ports []int) *upProcess {
	t.Helper()
	cmd := exec.Command(bin, "up",
		"--data-dir", dataDir,
		"--apiserver-port", strconv.Itoa(ports[0]),
		"--etcd-client-port", strconv.Itoa(ports[1]),
		"--etcd-peer-port", strconv.Itoa(ports[2]),
		"--node-metrics-port", strconv.Itoa(ports[3]),
		"--readiness-webhook-port", strconv.Itoa(ports[4]),
		"--node-api-port", strconv.Itoa(ports[5]),
		"--controller-manager-port", strconv.Itoa(ports[6]),
		"--scheduler-port", strconv.Itoa(ports[7]),
		// A pod range and bridge of this run's own (other test packages run at once).
		"--pod-cidr", fmt.Sprintf("10.246.%d.0/24", ports[0]%250),
		"--cni-bridge", fmt.Sprintf("spe%d", ports[0]),
	)
	t.Cleanup(func() {
		testenv.CleanNode(filepath.Join(dataDir, "node"))
		_ = exec.Command("ip", "link", "del", fmt.Sprintf("spe%d", ports[0])).Run()
	})
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &upProcess{cmd: cmd, upCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		upSeen := false
		for sc.Scan() {
			line := sc.Text()
			t.Logf("up: %s", line)
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

func (p *upProcess) waitUp(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.upCh:
	case <-p.done:
		t.Fatalf("steadyplane up exited before it was up:\n%s", p.text())
	case <-time.After(timeout):
		t.Fatalf("steadyplane up not up after %v:\n%s", timeout, p.text())
	}
}

func (p *upProcess) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.output, "\n")
}

// stop sends SIGTERM, as Ctrl-C or a service manager would, and waits.
func (p *upProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("steadyplane up did not stop within 90s after SIGTERM:\n%s", p.text())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("steadyplane up exited with %d after SIGTERM", code)
	}
}

func kubectl(t *testing.T, ctx context.Context, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	bin, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig, "--request-timeout=30s"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// childPids lists processes whose command line mentions dataDir: the children
// "up" started from it.
func childPids(dataDir string) []int {
	return procfs.Find(func(argv []string) bool { return strings.Contains(strings.Join(argv, "\x00"), dataDir) })
}

func TestUpKubectlRestartKeepsObjects(t *testing.T) {
	bin, dataDir, ports, ctx := setup(t, 10*time.Minute)
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")

	first := startUp(t, bin, dataDir, ports)
	first.waitUp(t, 4*time.Minute)
	out := first.text()
	for _, want := range []string{"etcd ready in", "apiserver ready in", "kubeconfig: " + kubeconfig} {
		if !strings.Contains(out, want) {
			t.Errorf("progress output lacks %q", want)
		}
	}

	got, err := kubectl(t, ctx, kubeconfig, "get", "namespaces", "-o", "name")
	if err != nil || !strings.Contains(got, "namespace/default") || !strings.Contains(got, "namespace/kube-system") {
		t.Fatalf("kubectl get namespaces: %v\n%s", err, got)
	}
	if got, err := kubectl(t, ctx, kubeconfig, "create", "namespace", "e2e-persist"); err != nil {
		t.Fatalf("kubectl create namespace: %v\n%s", err, got)
	}
	if got, err := kubectl(t, ctx, kubeconfig, "version", "-o", "json"); err != nil || !strings.Contains(got, `"gitVersion": "v1.36`) {
		t.Errorf("kubectl version: %v\n%s", err, got)
	}

	// The README's HA client example works against a single-server "up": it
	// has no alternative, and the lone server advertises none.
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	example := exec.CommandContext(ctx, "go", "run", "./examples/ha-client", "--kubeconfig", kubeconfig, "--count", "3", "--interval", "100ms")
	example.Dir = root
	if b, err := example.CombinedOutput(); err != nil || strings.Count(string(b), "namespaces from 127.0.0.1:"+strconv.Itoa(ports[0])) != 3 {
		t.Errorf("examples/ha-client: %v\n%s", err, b)
	}
	if got, err := kubectl(t, ctx, kubeconfig, "get", "--raw", "/metrics"); err != nil || !strings.Contains(got, "steadyplane_apiserver_alternative_services 0") {
		t.Errorf("a lone server should advertise no alternatives (gauge 0): %v", err)
	}

	// The kubeconfig lists the API server for failover, and steadyplane's
	// kubectl (also through a link named kubectl) uses it.
	raw, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if hosts, err := altsvc.HostsForServer(raw, "https://127.0.0.1:"+strconv.Itoa(ports[0])); err != nil || len(hosts) != 1 || hosts[0] != "127.0.0.1:"+strconv.Itoa(ports[0]) {
		t.Errorf("admin.kubeconfig's %s extension: %v, %v", altsvc.KubeconfigExtension, hosts, err)
	}
	link := filepath.Join(t.TempDir(), "kubectl")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{bin, "kubectl"}, {link}} {
		cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], "--kubeconfig", kubeconfig, "get", "namespace", "e2e-persist", "-o", "name")...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		if b, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != "namespace/e2e-persist" {
			t.Errorf("%v get namespace: %v\n%s", argv, err, b)
		}
	}

	// A second "up" on the same data directory must refuse, not corrupt it.
	second := exec.CommandContext(ctx, bin, "up", "--data-dir", dataDir, "--apiserver-port", "1", "--etcd-client-port", "2", "--etcd-peer-port", "3")
	if b, err := second.CombinedOutput(); err == nil || !strings.Contains(string(b), "in use by another steadyplane") {
		t.Errorf("second up on the same data directory: %v\n%s", err, b)
	}

	// Secrets are private.
	for _, f := range []string{"admin.kubeconfig", "pki/ca.key", "pki/sa.key", "pki/apiserver.key", "pki/etcd-ca.key"} {
		st, err := os.Stat(filepath.Join(dataDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}

	if len(childPids(dataDir)) < 2 {
		t.Errorf("expected etcd and apiserver children, found pids %v", childPids(dataDir))
	}
	first.stop(t)
	// Static pods stop in order: the controllers (handing back their
	// leases), the API server, then the node agent with etcd.
	text := first.text()
	order := []int{strings.Index(text, "stopping kube-scheduler"), strings.Index(text, "stopping kube-apiserver"), strings.Index(text, "stopping node")}
	if order[0] < 0 || order[0] > order[1] || order[1] > order[2] {
		t.Errorf("shutdown did not stop the controllers, the API server, then the node agent (with etcd):\n%s", text)
	}
	if pids := childPids(dataDir); len(pids) != 0 {
		t.Errorf("processes left running after up stopped: %v", pids)
	}

	// Up again on the same directory: the namespace is still there.
	again := startUp(t, bin, dataDir, ports)
	again.waitUp(t, 4*time.Minute)
	if !strings.Contains(again.text(), "pki: reusing CA") {
		t.Errorf("second run did not reuse the CA:\n%s", again.text())
	}
	if got, err := kubectl(t, ctx, kubeconfig, "get", "namespace", "e2e-persist", "-o", "name"); err != nil || strings.TrimSpace(got) != "namespace/e2e-persist" {
		t.Errorf("namespace created before the restart: %v\n%s", err, got)
	}
	again.stop(t)
}

// TestUpRestartsDeadComponents kills -9 the API server, the controller
// manager, the scheduler and the readiness controller in turn. The node agent runs them as static pods
// and starts each again; the controllers take their leader leases again
// (a new holder), and the cluster answers kubectl.
func TestUpRestartsDeadComponents(t *testing.T) {
	bin, dataDir, ports, ctx := setup(t, 8*time.Minute)
	p := startUp(t, bin, dataDir, ports)
	p.waitUp(t, 4*time.Minute)
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	if !strings.Contains(p.text(), "control plane: static pods") {
		t.Fatalf("up did not run the control plane as static pods:\n%s", p.text())
	}
	// componentPid finds the component's process: the binary installed in
	// the data directory, run with the component's subcommand.
	componentPid := func(subcommand string) int {
		pids := procfs.Find(func(argv []string) bool {
			return len(argv) > 1 && strings.HasPrefix(argv[0], filepath.Join(dataDir, "bin")+"/") && argv[1] == subcommand
		})
		if len(pids) == 0 {
			return 0
		}
		return pids[0]
	}
	holder := func(lease string) string {
		out, _ := kubectl(t, ctx, kubeconfig, "get", "lease", "-n", "kube-system", lease, "-o", "jsonpath={.spec.holderIdentity}")
		return strings.TrimSpace(out)
	}
	for _, c := range []struct{ subcommand, lease string }{{"apiserver", ""}, {"controller-manager", "kube-controller-manager"}, {"scheduler", "kube-scheduler"}, {"readiness-controller", ""}} {
		pid := componentPid(c.subcommand)
		if pid == 0 {
			t.Fatalf("%s process not found", c.subcommand)
		}
		before := ""
		if c.lease != "" {
			before = holder(c.lease)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(3 * time.Minute)
		for {
			again := componentPid(c.subcommand)
			_, err := kubectl(t, ctx, kubeconfig, "get", "namespace", "default", "-o", "name")
			if again != 0 && again != pid && err == nil && (c.lease == "" || holder(c.lease) != before) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not back after kill -9 (pid %d -> %d, kubectl %v)", c.subcommand, pid, again, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	p.stop(t)
}

// setup skips in -short mode and returns the binary, a fresh data directory,
// three free loopback ports and a context bounded by timeout.
func setup(t *testing.T, timeout time.Duration) (bin, dataDir string, ports []int, ctx context.Context) {
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
	ports, err = testenv.FreePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	return bin, filepath.Join(t.TempDir(), "sp"), ports, ctx
}

// readmeBlock returns the first sh block of the README's section heading.
func readmeBlock(t *testing.T, heading string) string {
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

// startWalkthrough starts "up" with its data in <work>/.steadyplane, where
// the README's walkthroughs expect it, and returns the context, the data
// directory and a function that runs a bash script in <work> with kubectl on
// the PATH and returns its output, failing the test if the script fails.
func startWalkthrough(t *testing.T, timeout time.Duration) (context.Context, string, func(name, script string) string) {
	t.Helper()
	bin, dataDir, ports, ctx := setup(t, timeout)
	work := filepath.Dir(dataDir)
	dataDir = filepath.Join(work, ".steadyplane")
	up := startUp(t, bin, dataDir, ports)
	up.waitUp(t, 4*time.Minute)
	t.Cleanup(func() { up.stop(t) })
	k, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	return ctx, dataDir, func(name, script string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(k)+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		t.Logf("%s:\n%s", name, out)
		if err != nil {
			t.Fatalf("%s failed: %v", name, err)
		}
		return string(out)
	}
}

// TestReadmeWalkthroughs runs the README's walkthroughs verbatim against one
// "steadyplane up", with kubectl as the client: Deployments, Services and
// namespace deletion (controller manager and scheduler), pods (logs, exec,
// port-forward) and readiness gates.
func TestReadmeWalkthroughs(t *testing.T) {
	deployments := readmeBlock(t, "Deployments, services and namespaces")
	pods := readmeBlock(t, "Pods on the node")
	gates := readmeBlock(t, "Pods with readiness gates")
	_, _, script := startWalkthrough(t, 10*time.Minute)
	run := func(name, block string) []string {
		t.Helper()
		return strings.Split(strings.TrimSpace(script("the README's "+name+" walkthrough", block)), "\n")
	}

	var rollouts int
	var slice, deleted bool
	for _, l := range run("deployment", deployments) {
		if strings.Contains(l, `deployment "web" successfully rolled out`) {
			rollouts++
		}
		// NAME  ADDRESSTYPE  PORTS  ENDPOINTS  AGE, with three addresses.
		if f := strings.Fields(l); len(f) == 5 && f[1] == "IPv4" && len(strings.Split(f[3], ",")) == 3 {
			slice = true
		}
		deleted = deleted || strings.Contains(l, `namespace "demo" deleted`)
	}
	if rollouts != 2 || !slice || !deleted {
		t.Errorf("deployment walkthrough: %d rollouts (want 2), an EndpointSlice with three addresses %v, namespace deleted %v", rollouts, slice, deleted)
	}

	// A pod's service-account token is mounted and the API server accepts it.
	whoami := script("a pod's service-account token", `export KUBECONFIG=$PWD/.steadyplane/admin.kubeconfig
T=$(kubectl exec deploy/web -- cat /var/run/secrets/kubernetes.io/serviceaccount/token)
S=$(kubectl config view -o jsonpath='{.clusters[0].cluster.server}')
kubectl --kubeconfig=/dev/null --server="$S" --certificate-authority=.steadyplane/pki/ca.crt --token="$T" auth whoami -o jsonpath='{.status.userInfo.username}'`)
	if !strings.HasSuffix(strings.TrimSpace(whoami), "system:serviceaccount:default:default") {
		t.Errorf("the pod's token authenticates as %q, want system:serviceaccount:default:default", whoami)
	}

	var hostname, listing, logged bool
	for _, l := range run("pod", pods) {
		hostname = hostname || l == "hello"
		listing = listing || strings.Contains(l, "<title>Directory listing for /</title>")
		logged = logged || strings.Contains(l, `"GET / HTTP/1.1" 200`)
	}
	if !hostname || !listing || !logged {
		t.Errorf("pod walkthrough: exec printed the pod's name %v, port-forward reached the server %v, logs -f streamed the request %v; want all", hostname, listing, logged)
	}

	var gets []string
	for _, l := range run("readiness-gate", gates) {
		if strings.HasPrefix(l, "gated ") {
			gets = append(gets, l)
		}
	}
	if len(gets) != 2 || !strings.Contains(gets[0], "1/1") || !strings.Contains(gets[0], "Running") || !strings.HasSuffix(gets[0], "0/2") || !strings.HasSuffix(gets[1], "2/2") {
		t.Errorf("kubectl get -o wide lines %q; want Running with gates 0/2, then 2/2", gets)
	}
}
