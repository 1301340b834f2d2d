package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/steadyplane/steadyplane/internal/testci"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// TestServices runs the README's Services walkthrough on "up" and then what
// a user relies on beyond it: an unowned cluster IP goes nowhere, names
// resolve through the cluster DNS (which survives kill -9), a Service
// scaled to zero refuses within 2 s of its endpoints going, kube-proxy killed
// with -9 comes back while the Service keeps answering, and a pod lists pods
// through the kubernetes Service with client-go's in-cluster configuration.
func TestServices(t *testing.T) {
	if os.Geteuid() != 0 {
		testci.CannotRun(t, "Services need root: kube-proxy programs the node's packet filter")
	}
	block := testup.ReadmeBlock(t, "Services and DNS")
	ctx, dataDir, script := testup.StartWalkthrough(t, 10*time.Minute)
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := testup.Kubectl(t, ctx, kubeconfig, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(out)
	}

	// Both pods answered through the cluster IP (uniq -c lines "N hello-..."),
	// and the node port answered from the machine.
	out := script("the README's Services walkthrough", block)
	pods := strings.Fields(kubectl("get", "pods", "-l", "app=hello", "-o", "jsonpath={.items[*].metadata.name}"))
	for _, pod := range pods {
		if !strings.Contains(out, " "+pod+"\n") {
			t.Errorf("pod %s did not answer through the cluster IP:\n%s", pod, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; len(pods) != 2 || (last != pods[0] && last != pods[1]) {
		t.Errorf("the node port answered %q; want one of the pods %v", last, pods)
	}

	clusterIP := kubectl("get", "service", "hello", "-o", "jsonpath={.spec.clusterIP}")
	get := func(ip string) error {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "80"), time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := fmt.Fprintf(conn, "GET / HTTP/1.0\r\n\r\n"); err != nil {
			return err
		}
		buf := make([]byte, 64)
		n, err := conn.Read(buf)
		if n == 0 {
			return fmt.Errorf("no answer: %v", err)
		}
		return nil
	}
	if err := get(clusterIP); err != nil {
		t.Fatalf("the cluster IP %s does not answer from the machine: %v", clusterIP, err)
	}

	// An address of the range that no Service owns is dropped by
	// kube-proxy's own rule (the test's drop rule would hide a missing one
	// from a probe, so the rule itself is checked).
	rules, err := exec.CommandContext(ctx, "nft", "list", "chain", "ip", "kube-proxy", "cluster-ips-check").CombinedOutput()
	if err != nil || !regexp.MustCompile(`ip daddr (\{ )?`+regexp.QuoteMeta(testup.ServiceCIDR)+`( \})? drop`).Match(rules) {
		t.Errorf("kube-proxy drops no traffic to unallocated cluster IPs of %s: %v\n%s", testup.ServiceCIDR, err, rules)
	}

	// kill -9 of kube-proxy: its rules stay, the Service answers all along,
	// and the node agent runs it again.
	proxyPid := func() int {
		pids := procfs.Find(func(argv []string) bool {
			return len(argv) > 1 && strings.HasPrefix(argv[0], filepath.Join(dataDir, "bin")+"/") && argv[1] == "proxy"
		})
		if len(pids) == 0 {
			return 0
		}
		return pids[0]
	}
	pid := proxyPid()
	if pid == 0 {
		t.Fatal("no kube-proxy process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	failures, killed := 0, time.Now()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if err := get(clusterIP); err != nil {
			failures++
			t.Logf("while kube-proxy was down: %v", err)
		}
		again := proxyPid()
		ready := kubectl("get", "pod", "-n", "kube-system", "kube-proxy-steadyplane", "-o", "jsonpath={.status.containerStatuses[0].ready}/{.status.containerStatuses[0].restartCount}")
		if again != 0 && again != pid && strings.HasPrefix(ready, "true/") && ready != "true/0" {
			t.Logf("kube-proxy ready again %v after kill -9", time.Since(killed).Round(100*time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy not back after kill -9 (pid %d -> %d, ready/restarts %s)", pid, again, ready)
		}
	}
	if failures > 0 {
		t.Errorf("the Service failed %d requests while kube-proxy restarted; want none", failures)
	}

	gateWaitsForProxy(ctx, t, kubectl, proxyPid, get)

	// A pod lists pods through the kubernetes Service with client-go's
	// in-cluster configuration: kubectl, given no kubeconfig, in a pod with
	// a service account allowed to list.
	inClusterListsPods(ctx, t, kubectl, dataDir)

	clusterDNS(ctx, t, kubeconfig, kubectl, clusterIP)

	// Scaled to zero: once the EndpointSlice has no serving endpoint, the
	// cluster IP refuses (rejected on the node) within 2 s.
	scaled := time.Now()
	kubectl("scale", "deployment", "hello", "--replicas=0")
	var emptied time.Time
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if emptied.IsZero() {
			// Read as objects: a slice with no endpoints has the field
			// absent, null or empty, which a jsonpath filter tells apart.
			out, err := testup.Kubectl(t, ctx, kubeconfig, "get", "endpointslices", "-l", "kubernetes.io/service-name=hello", "-o", "json")
			var list discoveryv1.EndpointSliceList
			if err == nil {
				err = json.Unmarshal([]byte(out), &list)
			}
			if err != nil {
				t.Fatalf("kubectl get endpointslices: %v\n%s", err, out)
			}
			if servingEndpoints(list.Items) == 0 {
				emptied = time.Now()
			}
		}
		if err := get(clusterIP); err != nil && isRefused(err) {
			if emptied.IsZero() {
				emptied = time.Now()
			}
			t.Logf("scaled to 0: refused %v after the scale, %v after the endpoints went", time.Since(scaled).Round(time.Millisecond), time.Since(emptied).Round(time.Millisecond))
			if d := time.Since(emptied); d > 2*time.Second {
				t.Errorf("the cluster IP refused %v after its endpoints went; want within 2s", d)
			}
			return
		}
	}
	t.Fatalf("the cluster IP of a Service scaled to 0 never refused (endpoints gone at %v)", emptied)
}

// servingEndpoints counts the endpoints of slices that serve.
func servingEndpoints(slices []discoveryv1.EndpointSlice) int {
	n := 0
	for _, sl := range slices {
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Serving == nil || *ep.Conditions.Serving {
				n++
			}
		}
	}
	return n
}

// gateWaitsForProxy: with kube-proxy frozen (SIGSTOP: alive, its rules
// stale, its /healthz silent), a pod behind a Service in a namespace with
// the load-balancer gate answers its direct check but stays not Ready with
// reason ProxyNotSynced; once kube-proxy runs again the pod turns Ready and
// the Service's cluster IP reaches it.
func gateWaitsForProxy(ctx context.Context, t *testing.T, kubectl func(...string) string, proxyPid func() int, get func(string) error) {
	t.Helper()
	pid := proxyPid()
	if pid == 0 {
		t.Fatal("no kube-proxy process")
	}
	// Frozen once it serves (it may have just restarted): alive, listening,
	// silent.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	healthz := ""
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if addr, ok := strings.CutPrefix(arg, "--healthz-bind-address="); ok {
			healthz = "http://" + addr + "/healthz"
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := (&http.Client{Timeout: time.Second}).Get(healthz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy's %s does not answer 200: %v", healthz, err)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	kubectl("create", "namespace", "gated")
	kubectl("label", "namespace", "gated", "steadyplane.io/readiness-gates=on")
	// The Service first: a pod whose gate turned True before any Service
	// selected it keeps it (the data path is checked for the Services that
	// select a pod when its gate is decided).
	kubectl("create", "service", "clusterip", "web", "-n", "gated", "--tcp=80:8080")
	kubectl("run", "web", "-n", "gated", "--image=busybox:1.36", "--labels=app=web", "--port=8080", "--",
		"sh", "-c", `hostname > index.html; trap "exit 0" TERM; httpd -f -p 8080 & wait`)
	const cond = `{.status.conditions[?(@.type=="steadyplane.io/load-balancer-ready")].reason}/{.status.conditions[?(@.type=="Ready")].status}`
	state := ""
	for deadline := time.Now().Add(90 * time.Second); !strings.HasPrefix(state, "ProxyNotSynced/"); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("with kube-proxy frozen, the gated pod's gate/Ready is %q; want ProxyNotSynced", state)
		}
		state = kubectl("get", "pod", "web", "-n", "gated", "-o", "jsonpath="+cond)
	}
	// It stays so while the proxy is frozen.
	for until := time.Now().Add(3 * time.Second); time.Now().Before(until); time.Sleep(500 * time.Millisecond) {
		if state = kubectl("get", "pod", "web", "-n", "gated", "-o", "jsonpath="+cond); state != "ProxyNotSynced/False" {
			t.Fatalf("with kube-proxy frozen, the gated pod's gate/Ready turned %q", state)
		}
	}
	t.Logf("frozen kube-proxy: %s", kubectl("get", "pod", "web", "-n", "gated", "-o", `jsonpath={.status.conditions[?(@.type=="steadyplane.io/load-balancer-ready")].message}`))
	resume()
	thawed := time.Now()
	for deadline := time.Now().Add(60 * time.Second); state != "TargetHealthy/True"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy running again, the gated pod's gate/Ready stays %q", state)
		}
		state = kubectl("get", "pod", "web", "-n", "gated", "-o", "jsonpath="+cond)
	}
	t.Logf("gated pod Ready %v after kube-proxy ran again", time.Since(thawed).Round(100*time.Millisecond))
	ip := kubectl("get", "service", "web", "-n", "gated", "-o", "jsonpath={.spec.clusterIP}")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = get(ip); err == nil {
			break
		}
	}
	if err != nil {
		t.Errorf("the gated pod, Ready, does not answer through its Service %s: %v", ip, err)
	}
	kubectl("delete", "namespace", "gated", "--wait=false")
}

// inClusterListsPods runs "steadyplane kubectl get pods" in a pod of
// kube-system (the host runtime class runs the installed binary) whose
// service account may view, with no kubeconfig: client-go's in-cluster
// configuration, the kubernetes Service's cluster IP and token.
func inClusterListsPods(ctx context.Context, t *testing.T, kubectl func(...string) string, dataDir string) {
	t.Helper()
	binDir := filepath.Join(dataDir, "bin")
	bins, err := filepath.Glob(filepath.Join(binDir, "steadyplane-*"))
	if err != nil || len(bins) == 0 {
		t.Fatalf("no installed binary in %s: %v", binDir, err)
	}
	kubectl("create", "rolebinding", "in-cluster-view", "-n", "kube-system", "--clusterrole=view", "--serviceaccount=kube-system:default")
	manifest := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"in-cluster","namespace":"kube-system"},
"spec":{"runtimeClassName":"steadyplane-host","restartPolicy":"Never",
"volumes":[{"name":"bin","hostPath":{"path":%q}}],
"containers":[{"name":"kubectl","image":"steadyplane","command":[%q,"kubectl","get","pods","-n","kube-system","-o","name"],
"volumeMounts":[{"name":"bin","mountPath":%q,"readOnly":true}]}]}}`, binDir, bins[0], binDir)
	f := filepath.Join(t.TempDir(), "in-cluster.json")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", f)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		phase := kubectl("get", "pod", "-n", "kube-system", "in-cluster", "-o", "jsonpath={.status.phase}")
		if phase == "Succeeded" || phase == "Failed" {
			logs := kubectl("logs", "-n", "kube-system", "in-cluster")
			if phase != "Succeeded" || !strings.Contains(logs, "pod/kube-proxy-steadyplane") {
				t.Errorf("in-cluster kubectl: %s, output:\n%s", phase, logs)
			}
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the in-cluster pod did not finish: phase %q", phase)
		}
	}
}

// clusterDNS resolves from a pod (busybox's nslookup, through the kube-dns
// Service): the Service by each of its names, kubernetes.default, a
// headless Service's pods and an ExternalName's CNAME; then CoreDNS is
// killed with -9 and answers again.
func clusterDNS(ctx context.Context, t *testing.T, kubeconfig string, kubectl func(...string) string, clusterIP string) {
	t.Helper()
	kubectl("expose", "deployment", "hello", "--name", "hello-headless", "--cluster-ip=None", "--port", "80", "--target-port", "8080")
	kubectl("create", "service", "externalname", "docs", "--external-name", "docs.example.com")
	importResolveImage(ctx, t, filepath.Dir(kubeconfig))
	kubectl("run", "dns-client", "--image=local/resolve:1", "--image-pull-policy=Never", "--restart=Never", "--", "sleep", "600")
	kubectl("wait", "--for=condition=Ready", "pod/dns-client", "--timeout=120s")
	inPod := func(args ...string) (string, error) {
		return testup.Kubectl(t, ctx, kubeconfig, append([]string{"exec", "dns-client", "--"}, args...)...)
	}
	podIPs := strings.Fields(kubectl("get", "pods", "-l", "app=hello", "-o", "jsonpath={.items[*].status.podIP}"))
	// Go's resolver reads the pod's resolv.conf as libc does: the search
	// path and ndots:5 make "hello" and "hello.default" the Service.
	out, err := inPod("/resolve", "hello", "hello.default", "hello.default.svc.cluster.local", "kubernetes.default", "hello-headless")
	if err != nil {
		t.Errorf("lookups in a pod: %v\n%s", err, out)
	}
	want := map[string][]string{"hello": {clusterIP}, "hello.default": {clusterIP}, "hello.default.svc.cluster.local": {clusterIP},
		"kubernetes.default": {"10.96.0.1"}, "hello-headless": podIPs}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		addrs := f[1:]
		slices.Sort(addrs)
		w := slices.Clone(want[f[0]])
		slices.Sort(w)
		if !slices.Equal(addrs, w) {
			t.Errorf("%s resolved to %v in a pod; want %v", f[0], addrs, w)
		}
		delete(want, f[0])
	}
	if len(want) > 0 {
		t.Errorf("not looked up: %v\n%s", want, out)
	}
	// busybox's own resolver, as a user's "nslookup": the ExternalName's CNAME.
	if out, _ := inPod("nslookup", "docs.default.svc.cluster.local"); !strings.Contains(out, "canonical name = docs.example.com") {
		t.Errorf("nslookup of an ExternalName Service: want its CNAME in\n%s", out)
	}
	lookup := func(name string) (string, error) { return inPod("/resolve", name) }
	// This cluster's CoreDNS, not another test's running beside it.
	uids := strings.Fields(kubectl("get", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns", "-o", "jsonpath={.items[*].metadata.uid}"))
	pids := procfs.Find(func(argv []string) bool {
		return len(argv) > 1 && argv[0] == "/usr/local/bin/steadyplane" && argv[1] == "dns"
	})
	pids = slices.DeleteFunc(pids, func(pid int) bool {
		return !slices.ContainsFunc(uids, func(uid string) bool { return procfs.InPod(pid, uid) })
	})
	if len(pids) != 1 {
		t.Fatalf("CoreDNS processes %v of pods %v; want one", pids, uids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		out, err := lookup("hello")
		if err == nil && strings.Contains(out, clusterIP) {
			t.Logf("CoreDNS answered again %v after kill -9", time.Since(killed).Round(100*time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CoreDNS does not answer after kill -9: %v\n%s", err, out)
		}
	}
}

// importResolveImage makes local/resolve:1 (busybox and /resolve, the Go
// resolver of testdata/resolve, built static) and imports it into the
// node's image store of the data directory, offline.
func importResolveImage(ctx context.Context, t *testing.T, dataDir string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "resolve")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./testdata/resolve")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the resolver: %v\n%s", err, out)
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	base, err := testimage.Busybox()
	if err != nil {
		t.Fatal(err)
	}
	layer, err := testimage.Layer([]testimage.File{{Name: "resolve", Mode: 0o755, Body: body}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "resolve.tar")
	if err := testimage.WriteArchive(archive, img, "local/resolve:1"); err != nil {
		t.Fatal(err)
	}
	sp, err := testenv.Binary()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, sp, "images", "import", "--data-dir", dataDir, archive).CombinedOutput(); err != nil {
		t.Fatalf("importing the resolver image: %v\n%s", err, out)
	}
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
