// Package e2e runs whole-system scenarios: the steadyplane binary as a user
// runs it, and kubectl as the client.
package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
)

func TestUpKubectlRestartKeepsObjects(t *testing.T) {
	bin, dataDir, ports, ctx := testup.Setup(t, 10*time.Minute)
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")

	first := testup.Start(t, bin, dataDir, ports)
	first.WaitUp(t, 4*time.Minute)
	out := first.Text()
	for _, want := range []string{"etcd ready in", "apiserver ready in", "kubeconfig: " + kubeconfig} {
		if !strings.Contains(out, want) {
			t.Errorf("progress output lacks %q", want)
		}
	}

	got, err := testup.Kubectl(t, ctx, kubeconfig, "get", "namespaces", "-o", "name")
	if err != nil || !strings.Contains(got, "namespace/default") || !strings.Contains(got, "namespace/kube-system") {
		t.Fatalf("kubectl get namespaces: %v\n%s", err, got)
	}
	if got, err := testup.Kubectl(t, ctx, kubeconfig, "create", "namespace", "e2e-persist"); err != nil {
		t.Fatalf("kubectl create namespace: %v\n%s", err, got)
	}
	// The server's Node has the role control-plane, and no taint: pods run
	// on a single server.
	if got, err := testup.Kubectl(t, ctx, kubeconfig, "get", "nodes", "--no-headers"); err != nil || !strings.Contains(got, " control-plane ") {
		t.Errorf("kubectl get nodes: want the role control-plane: %v\n%s", err, got)
	}
	if got, err := testup.Kubectl(t, ctx, kubeconfig, "get", "nodes", "-o", "jsonpath={.items[*].spec.taints[*].key}"); err != nil || strings.Contains(got, "node-role.kubernetes.io/control-plane") {
		t.Errorf("the server's Node is tainted %q (%v); want no control-plane taint without --control-plane-taint", got, err)
	}
	if got, err := testup.Kubectl(t, ctx, kubeconfig, "version", "-o", "json"); err != nil || !strings.Contains(got, `"gitVersion": "v1.36`) {
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
	if got, err := testup.Kubectl(t, ctx, kubeconfig, "get", "--raw", "/metrics"); err != nil || !strings.Contains(got, "steadyplane_apiserver_alternative_services 0") {
		t.Errorf("a lone server should advertise no alternatives (gauge 0): %v", err)
	}

	// The kubeconfig lists the API server for failover, and steadyplane's
	// kubectl (also through a link named kubectl) uses it.
	raw, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if hosts, err := altsvcclient.HostsForServer(raw, "https://127.0.0.1:"+strconv.Itoa(ports[0])); err != nil || len(hosts) != 1 || hosts[0] != "127.0.0.1:"+strconv.Itoa(ports[0]) {
		t.Errorf("admin.kubeconfig's %s extension: %v, %v", altsvcclient.KubeconfigExtension, hosts, err)
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

	if len(testup.ChildPids(dataDir)) < 2 {
		t.Errorf("expected etcd and apiserver children, found pids %v", testup.ChildPids(dataDir))
	}
	first.Stop(t)
	// Static pods stop in order: the controllers (handing back their
	// leases), the API server, then the node agent with etcd.
	text := first.Text()
	order := []int{strings.Index(text, "stopping kube-scheduler"), strings.Index(text, "stopping kube-apiserver"), strings.Index(text, "stopping node")}
	if order[0] < 0 || order[0] > order[1] || order[1] > order[2] {
		t.Errorf("shutdown did not stop the controllers, the API server, then the node agent (with etcd):\n%s", text)
	}
	if pids := testup.ChildPids(dataDir); len(pids) != 0 {
		t.Errorf("processes left running after up stopped: %v", pids)
	}

	// Up again on the same directory: the namespace is still there. This
	// time the server is tainted, for clusters with workers.
	again := testup.Start(t, bin, dataDir, ports, "--control-plane-taint")
	again.WaitUp(t, 4*time.Minute)
	if !strings.Contains(again.Text(), "pki: reusing CA") {
		t.Errorf("second run did not reuse the CA:\n%s", again.Text())
	}
	if got, err := testup.Kubectl(t, ctx, kubeconfig, "get", "nodes", "-o", `jsonpath={range .items[*].spec.taints[*]}{.key}:{.effect} {end}`); err != nil || !slices.Contains(strings.Fields(got), "node-role.kubernetes.io/control-plane:NoSchedule") {
		t.Errorf("up --control-plane-taint: the Node's taints are %q (%v)", got, err)
	}
	if got, err := testup.Kubectl(t, ctx, kubeconfig, "get", "namespace", "e2e-persist", "-o", "name"); err != nil || strings.TrimSpace(got) != "namespace/e2e-persist" {
		t.Errorf("namespace created before the restart: %v\n%s", err, got)
	}
	again.Stop(t)
}

// TestUpRestartsDeadComponents kills -9 the API server, the controller
// manager, the scheduler and the readiness controller in turn. The node agent runs them as static pods
// and starts each again; the controllers take their leader leases again
// (a new holder), and the cluster answers kubectl.
func TestUpRestartsDeadComponents(t *testing.T) {
	bin, dataDir, ports, ctx := testup.Setup(t, 8*time.Minute)
	p := testup.Start(t, bin, dataDir, ports)
	p.WaitUp(t, 4*time.Minute)
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	if !strings.Contains(p.Text(), "control plane: static pods") {
		t.Fatalf("up did not run the control plane as static pods:\n%s", p.Text())
	}
	holder := func(lease string) string {
		out, _ := testup.Kubectl(t, ctx, kubeconfig, "get", "lease", "-n", "kube-system", lease, "-o", "jsonpath={.spec.holderIdentity}")
		return strings.TrimSpace(out)
	}
	for _, c := range []struct{ subcommand, lease string }{{"apiserver", ""}, {"controller-manager", "kube-controller-manager"}, {"scheduler", "kube-scheduler"}, {"proxy", ""}, {"readiness-controller", ""}} {
		// The previous kill may have it restarting (a controller that
		// lost its lease while the API server was away exits, and the
		// node agent starts it again after its backoff).
		before := ""
		if c.lease != "" {
			before = holder(c.lease)
		}
		pid := testup.KillComponent(t, dataDir, c.subcommand)
		deadline := time.Now().Add(3 * time.Minute)
		for {
			again := testup.ComponentPid(dataDir, c.subcommand)
			_, err := testup.Kubectl(t, ctx, kubeconfig, "get", "namespace", "default", "-o", "name")
			if again != 0 && again != pid && err == nil && (c.lease == "" || holder(c.lease) != before) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not back after kill -9 (pid %d -> %d, kubectl %v)", c.subcommand, pid, again, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	p.Stop(t)
}

// TestReadmeWalkthroughs runs the README's walkthroughs verbatim against one
// "steadyplane up", with kubectl as the client: Deployments, Services and
// namespace deletion (controller manager and scheduler), pods (logs, exec,
// port-forward), in-place resize, sidecars with hooks and image volumes, and
// readiness gates.
func TestReadmeWalkthroughs(t *testing.T) {
	deployments := testup.ReadmeBlock(t, "Deployments, services and namespaces")
	pods := testup.ReadmeBlock(t, "Pods on the node")
	gates := testup.ReadmeBlock(t, "Pods with readiness gates")
	resize := testup.ReadmeBlock(t, "Resizing a running pod")
	sidecars := testup.ReadmeBlock(t, "Sidecars, lifecycle hooks and image volumes")
	ctx, dataDir, script := testup.StartWalkthrough(t, 10*time.Minute)
	run := func(name, block string) []string {
		t.Helper()
		return strings.Split(strings.TrimSpace(script("the README's "+name+" walkthrough", block)), "\n")
	}

	var rollouts int
	var slice, deleted, byName bool
	for _, l := range run("deployment", deployments) {
		byName = byName || strings.HasPrefix(l, "web-")
		if strings.Contains(l, `deployment "web" successfully rolled out`) {
			rollouts++
		}
		// NAME  ADDRESSTYPE  PORTS  ENDPOINTS  AGE, with three addresses.
		if f := strings.Fields(l); len(f) == 5 && f[1] == "IPv4" && len(strings.Split(f[3], ",")) == 3 {
			slice = true
		}
		deleted = deleted || strings.Contains(l, `namespace "demo" deleted`)
	}
	if rollouts != 2 || !slice || !deleted || !byName {
		t.Errorf("deployment walkthrough: %d rollouts (want 2), an EndpointSlice with three addresses %v, namespace deleted %v, a pod answered through the Service's name %v", rollouts, slice, deleted, byName)
	}

	// A pod's service-account token is mounted and the API server accepts it.
	whoami := script("a pod's service-account token", `export KUBECONFIG=$PWD/.steadyplane/admin.kubeconfig
T=$(kubectl exec deploy/web -- cat /var/run/secrets/kubernetes.io/serviceaccount/token)
S=$(kubectl config view -o jsonpath='{.clusters[0].cluster.server}')
kubectl --kubeconfig=/dev/null --server="$S" --certificate-authority=.steadyplane/pki/ca.crt --token="$T" auth whoami -o jsonpath='{.status.userInfo.username}'`)
	if !strings.HasSuffix(strings.TrimSpace(whoami), "system:serviceaccount:default:default") {
		t.Errorf("the pod's token authenticates as %q, want system:serviceaccount:default:default", whoami)
	}

	var hostname, listing, logged, isolated, filtered, greeted, debugged bool
	for _, l := range run("pod", pods) {
		greeted = greeted || l == "hello, steadyplane"
		debugged = debugged || strings.Join(strings.Fields(l), " ") == "1 httpd -f -vv -p 8080"
		hostname = hostname || l == "hello"
		listing = listing || strings.Contains(l, "<title>hello</title>")
		logged = logged || strings.HasSuffix(l, "response:200")
		isolated = isolated || strings.Contains(l, "can't open '/etc/shadow': No such file or directory")
		filtered = filtered || strings.Join(strings.Fields(l), " ") == "Seccomp: 2"
	}
	if !hostname || !listing || !logged || !isolated || !filtered || !greeted || !debugged {
		t.Errorf("pod walkthrough: exec printed the pod's name %v, port-forward reached the server %v, logs -f streamed the request %v, the host's /etc/shadow is not there %v, a seccomp filter %v, run -i read its stdin %v, debug --target saw the target's httpd as PID 1 %v; want all", hostname, listing, logged, isolated, filtered, greeted, debugged)
	}

	// In-place resize: the new memory limit is in the container's cgroup,
	// and it did not restart.
	var limit, kept bool
	for _, l := range run("resize", resize) {
		limit = limit || l == "100663296"
		kept = kept || l == "restarts: 0"
	}
	if !limit || !kept {
		t.Errorf("resize walkthrough: the container reads its new memory limit %v, not restarted %v; want both", limit, kept)
	}

	// Sidecars, hooks and image volumes: the app ran once the sidecar was
	// up, ran a program from the image volume, could not write there, and
	// the sidecar was stopped (exit 0 through its trap) once the app ended.
	var logger, fromVolume, readOnly, stopped bool
	for _, l := range run("sidecar", sidecars) {
		logger = logger || l == "logger up"
		fromVolume = fromVolume || l == "ran from the image volume"
		readOnly = readOnly || l == "read-only"
		stopped = stopped || l == "sidecar: 0"
	}
	if !logger || !fromVolume || !readOnly || !stopped {
		t.Errorf("sidecar walkthrough: the app saw the sidecar's file %v, ran from the image volume %v, could not write to it %v, the sidecar stopped with 0 %v; want all", logger, fromVolume, readOnly, stopped)
	}

	// The README's "kubectl run -it": a shell on a terminal, typed into
	// through kubectl's own terminal.
	kubectlOnATerminal(ctx, t, filepath.Join(dataDir, "admin.kubeconfig"))

	// What no ordinary pod may ask for: the host's root by hostPath (Pod
	// Security, baseline) or by the host runtime class (steadyplane's policy).
	refused := script("pods Pod Security and the host runtime class refuse", `export KUBECONFIG=$PWD/.steadyplane/admin.kubeconfig
kubectl run root --image=busybox:1.36 --overrides='{"spec":{"volumes":[{"name":"root","hostPath":{"path":"/"}}]}}' -- sleep 1 2>&1 || true
kubectl run host --image=busybox:1.36 --overrides='{"spec":{"runtimeClassName":"steadyplane-host"}}' -- sleep 1 2>&1 || true
kubectl run fine --image=busybox:1.36 -- sleep 1 2>&1`)
	for _, want := range []string{`violates PodSecurity "baseline:latest": hostPath volumes`, `steadyplane-host-runtime-class`, `pod/fine created`} {
		if !strings.Contains(refused, want) {
			t.Errorf("Pod Security and the host runtime class policy: output lacks %q:\n%s", want, refused)
		}
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

// kubectlOnATerminal runs `kubectl run -it ... -- sh` with a terminal as
// its stdin and stdout, as a person at a terminal does, types a command
// into the pod's shell until its answer shows, then exits the shell; the
// pod goes with it (--rm).
func kubectlOnATerminal(ctx context.Context, t *testing.T, kubeconfig string) {
	t.Helper()
	k, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, k, "run", "tty", "-it", "--rm", "--restart=Never", "--image=busybox:1.36", "--", "sh")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "TERM=xterm")
	term, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	var mu sync.Mutex
	var out strings.Builder
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := term.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	seen := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(out.String(), s)
	}
	// Typed again until it shows: what is typed before kubectl attaches
	// reaches no one, and the terminal has its size a moment after.
	for i := 0; i < 60 && !(seen("hi-42") && seen("30 100")); i++ {
		_, _ = term.Write([]byte("echo hi-$((40+2)); stty size\n"))
		time.Sleep(time.Second)
	}
	if !seen("hi-42") {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("kubectl run -it: the pod's shell never answered; the terminal showed:\n%s", out.String())
	}
	_, _ = term.Write([]byte("exit\n"))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("kubectl run -it ended with %v", err)
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Error("kubectl run -it did not end within a minute of exit")
	}
	mu.Lock()
	defer mu.Unlock()
	// The pod's terminal has the size of kubectl's.
	if !strings.Contains(out.String(), "30 100") {
		t.Errorf("kubectl run -it: stty size in the pod did not show kubectl's 30 rows and 100 columns:\n%s", out.String())
	}
	t.Logf("kubectl run -it:\n%s", out.String())
}
