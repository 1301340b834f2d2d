package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/join"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// haClusterCIDR is the pods' range of the three-server cluster; each
// host's pods are on its own network namespace's bridge.
const haClusterCIDR = "10.216.0.0/16"

// server is one "up" on a test host.
type server struct {
	// host is its host name, name its Node's (the first server's is up's
	// default, a joining server's its host name).
	host, name, ip, dir, dataDir string
	// index is its host's in the test network.
	index int
	up    *testup.Up
}

func (s *server) kubeconfig() string { return filepath.Join(s.dataDir, "admin.kubeconfig") }
func (s *server) url() string        { return "https://" + s.ip + ":6443" }

// importBusybox puts the busybox image in the server's image import
// directory, for up to load at start.
func (s *server) importBusybox(t *testing.T) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(s.dataDir, "images"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := testimage.BusyboxArchive(filepath.Join(s.dataDir, "images", "busybox.tar")); err != nil {
		t.Fatal(err)
	}
}

// TestThreeServersNoLoadBalancer runs the README's "Three servers, no load
// balancer" walkthrough verbatim, each command on the host its comments
// name (a network namespace with a host name of its own: host N is the
// test network's Nth address where the README says 10.0.0.N, and runs in a
// directory of its own, where .steadyplane is its data directory). It adds
// only what this machine needs to the commands that run a node: the runc
// runtime, a resolver file with no nameserver, pod ranges no route uses,
// and the worker's directory and images. Between the walkthrough's steps it
// refuses a wrong or expired token without a trace, joins two servers at
// once (etcd takes one learner at a time), spreads a Deployment over the
// four nodes (which reach each other's pods, and Services and their names
// from the worker), gates pods through every server, rolls revisions,
// black-holes a server, and kills the server the admin kubeconfig names,
// then its whole host: steadyplane kubectl and a client-go program go on.
// Two servers lost, the survivor is reset, then restored from a snapshot
// one of the lost had taken, and that one joins it again.
func TestThreeServersNoLoadBalancer(t *testing.T) {
	if testing.Short() {
		testci.CannotRun(t, "-short: this test runs three steadyplane up")
	}
	testenv.RequireNetwork(t)
	testimage.RequireBusybox(t)
	testenv.RequireUnusedRange(t, haClusterCIDR)
	walk, err := parseThreeServers(testup.ReadmeBlock(t, "Three servers, no load balancer"))
	if err != nil {
		t.Fatalf("the README's walkthrough: %v", err)
	}
	bin, err := testenv.Binary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 22*time.Minute)
	defer cancel()
	nw, err := testenv.NewNetwork(4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nw.Close)
	work := t.TempDir()
	// The walkthrough's commands say "steadyplane".
	pathDir := filepath.Join(work, "bin")
	if err := os.MkdirAll(pathDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(pathDir, "steadyplane")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+pathDir+":"+os.Getenv("PATH"), "HOME="+work)
	resolv := filepath.Join(work, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("# no nameserver: nothing resolved off the machine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	upExtra := []string{"--runtime", "runc", "--resolv-conf", resolv, "--cluster-cidr", haClusterCIDR, "--pod-cidr", "10.216.0.0/24"}
	// hostCmd is a walkthrough's command line run on host i, in its
	// directory, until ctx ends (the test's own context would kill what
	// runs until the cleanups stop it).
	hostCmd := func(ctx context.Context, i int, line string, extra ...string) *exec.Cmd {
		words := strings.Fields(walk.onHosts(line, nw))
		host := fmt.Sprintf("s%d", i+1)
		if i == walk.worker.host {
			host = fmt.Sprintf("w%d", i+1)
		}
		name, args := nw.NSEnter(i, host, words[0], append(words[1:], extra...)...)
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = filepath.Join(work, fmt.Sprintf("host%d", i+1)), env
		return cmd
	}
	servers := make([]*server, 3)
	for i := range servers {
		s := &server{host: fmt.Sprintf("s%d", i+1), name: fmt.Sprintf("s%d", i+1), ip: nw.Hosts[i].IP.String(), dir: filepath.Join(work, fmt.Sprintf("host%d", i+1)), index: i}
		if i == 0 {
			s.name = "steadyplane"
		}
		s.dataDir = filepath.Join(s.dir, ".steadyplane")
		servers[i] = s
		s.importBusybox(t)
		t.Cleanup(func() {
			testup.KeepLogs(t, s.name, s.dataDir)
			testenv.CleanNode(filepath.Join(s.dataDir, "node"))
			name, args := nw.NSEnter(i, s.host, bin, "cleanup", "--data-dir", s.dataDir)
			_ = exec.Command(name, args...).Run()
		})
	}
	// start runs the walkthrough's up line on server i.
	start := func(i int, line string) {
		servers[i].up = testup.StartCmd(t, servers[i].name, hostCmd(context.Background(), i, line, upExtra...))
	}
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err == nil {
			err = os.WriteFile(to, b, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	voters := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, n+" learner=false")
		}
		slices.Sort(out)
		return out
	}

	begun := time.Now()
	start(0, walk.first.line)
	servers[0].up.WaitUp(t, 5*time.Minute)
	t.Logf("first server up in %.1fs", time.Since(begun).Seconds())
	tokenPath := filepath.Join(servers[0].dataDir, "token")
	if fi, err := os.Stat(tokenPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v; want a 0600 file", tokenPath, fi, err)
	}
	if want := "--server " + servers[0].url() + " --token-file"; !strings.Contains(servers[0].up.Text(), want) {
		t.Errorf("the first server does not print the join command (%q)", want)
	}
	raw, _ := os.ReadFile(tokenPath)
	tok, err := join.ParseToken(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	// A wrong secret, a token that pins another CA, an expired token: each
	// refused, with a clear error, before anything is written anywhere.
	wrongSecret := tok
	wrongSecret.Secret = "0000000000000000"
	otherCA := tok
	otherCA.CAHash = "sha256:" + strings.Repeat("0", 64)
	// A token of the cluster's whose bootstrap token Secret expired an
	// hour ago (the API server's authenticator refuses it).
	expired := tok
	expired.ID, expired.Secret = "e2eexp", "0123456789abcdef"
	expiredSecret := join.NewTokenSecret(expired, join.WorkerToken, time.Hour, time.Now().Add(-2*time.Hour), "e2e: expired")
	if _, err := testup.HAClient(t, servers[0].kubeconfig()).CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, expiredSecret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token join.Token
		want  string
	}{{wrongSecret, "refused the join token"}, {otherCA, "not the one the join token pins"}, {expired, "refused the join token"}} {
		dir := filepath.Join(work, "refused", "sp")
		name, args := nw.NSEnter(1, "refused", bin, "up", "--data-dir", dir, "--bind-address", servers[1].ip, "--server", servers[0].url(), "--token", tc.token.String())
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		out, err := exec.CommandContext(cctx, name, args...).CombinedOutput()
		ccancel()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("join with a bad token: %v, want an error saying %q:\n%s", err, tc.want, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "pki", "ca.crt")); err == nil {
			t.Errorf("a refused join left a CA in %s", dir)
		}
	}
	etcdMembers := func() ([]string, error) { return etcdMemberList(ctx, servers[0]) }
	if members, err := etcdMembers(); err != nil || len(members) != 1 {
		t.Fatalf("etcd members after the refused joins: %v, %v; want the first alone", members, err)
	}

	// Two servers join at once, each with a copy of the token.
	begun = time.Now()
	for _, j := range walk.joins {
		copyFile(tokenPath, filepath.Join(servers[j.host].dir, "token"))
		start(j.host, j.line)
	}
	servers[1].up.WaitUp(t, 8*time.Minute)
	servers[2].up.WaitUp(t, 8*time.Minute)
	t.Logf("two servers joined at once, both up in %.1fs", time.Since(begun).Seconds())
	if out := servers[1].up.Text() + servers[2].up.Text(); !strings.Contains(out, "promoted to a voting member") {
		t.Errorf("no server reported its etcd member's promotion")
	}
	if members, err := etcdMembers(); err != nil || !slices.Equal(members, voters(servers[0].name, servers[1].name, servers[2].name)) {
		t.Errorf("etcd members: %v, %v; want three voters", members, err)
	}

	// Re-running up on a joined data directory restarts it as a member
	// (the flags to join are not used again).
	servers[1].up.Stop(t)
	begun = time.Now()
	start(1, walk.joins[0].line)
	servers[1].up.WaitUp(t, 5*time.Minute)
	t.Logf("a joined server restarted in %.1fs", time.Since(begun).Seconds())
	if out := servers[1].up.Text(); !strings.Contains(out, "joined the cluster through") || strings.Contains(out, "added member") {
		t.Errorf("the restarted server did not reuse its membership:\n%s", out)
	}

	// A worker: no cluster keys, credentials by certificate requests.
	workerHost := filepath.Join(work, fmt.Sprintf("host%d", walk.worker.host+1))
	workerDir := filepath.Join(workerHost, "node")
	// The node token asks for node credentials and opens no cluster key.
	nodeTokenPath := filepath.Join(servers[0].dataDir, "node-token")
	rawNode, _ := os.ReadFile(nodeTokenPath)
	nodeTok, err := join.ParseToken(string(rawNode))
	if err != nil {
		t.Fatal(err)
	}
	if caPEM, err := os.ReadFile(filepath.Join(servers[0].dataDir, "pki", "ca.crt")); err != nil {
		t.Fatal(err)
	} else if _, err := join.FetchBundle(ctx, servers[0].url(), caPEM, nodeTok); err == nil {
		t.Error("the node token opened the cluster's keys")
	}
	// Every server's aggregation layer is of one front-proxy CA, which
	// extension API servers trust.
	for _, s := range servers[1:] {
		first, _ := os.ReadFile(filepath.Join(servers[0].dataDir, "pki", "front-proxy-ca.crt"))
		joined, err := os.ReadFile(filepath.Join(s.dataDir, "pki", "front-proxy-ca.crt"))
		if err != nil || len(first) == 0 || string(joined) != string(first) {
			t.Errorf("%s's front-proxy CA is not the first server's (%v)", s.dataDir, err)
		}
	}
	workerImages := filepath.Join(workerHost, "images")
	if err := os.MkdirAll(workerImages, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := testimage.BusyboxArchive(filepath.Join(workerImages, "busybox.tar")); err != nil {
		t.Fatal(err)
	}
	copyFile(nodeTokenPath, filepath.Join(workerHost, "node-token"))
	t.Cleanup(func() { testenv.CleanNode(workerDir) })
	// Its default directory is /var/lib/steadyplane/node, the machine's.
	worker := testup.StartCmd(t, "w4", hostCmd(context.Background(), walk.worker.host, walk.worker.line, "--root-dir", workerDir, "--runtime", "runc", "--resolv-conf", resolv, "--image-import-dir", workerImages))
	t.Cleanup(func() { worker.Stop(t) })

	client := testup.HAClient(t, servers[1].kubeconfig())
	testup.WaitFor(t, ctx, 3*time.Minute, "four Ready nodes and three API servers", func() (bool, string) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var ready []string
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == "Ready" && c.Status == "True" {
					ready = append(ready, n.Name+"="+n.Spec.PodCIDR)
				}
			}
		}
		slices.Sort(ready)
		raw, err := clientcmd.LoadFromFile(servers[0].kubeconfig())
		if err != nil {
			return false, err.Error()
		}
		hosts, _ := altsvcclient.HostsForServer(raw, servers[0].url())
		return len(ready) == 4 && len(hosts) == 3, fmt.Sprintf("ready nodes %v, admin kubeconfig of s0 lists %v", ready, hosts)
	})
	// The walkthrough's kubectl, from the first server's directory.
	kubectlAnywhere := func(when string) {
		cmd := exec.CommandContext(ctx, "sh", "-c", walk.kubectl.line)
		cmd.Dir, cmd.Env = servers[0].dir, env
		out, err := cmd.CombinedOutput()
		t.Logf("the README's %q %s:\n%s", walk.kubectl.line, when, out)
		want := []string{servers[0].name, servers[1].name, servers[2].name, "w4"}
		for _, n := range want {
			if err != nil || !strings.Contains(string(out), "\n"+n+" ") {
				t.Errorf("the README's %q %s: %v; want the nodes %v", walk.kubectl.line, when, err, want)
				return
			}
		}
		// ROLES: control-plane on the servers, none on the worker.
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 2 && slices.Contains(want, f[0]) {
				if role := map[bool]string{true: "<none>", false: "control-plane"}[f[0] == "w4"]; f[2] != role {
					t.Errorf("kubectl get nodes %s: %s has the roles %q, want %q", when, f[0], f[2], role)
				}
			}
		}
	}
	kubectlAnywhere("with every server up")
	nodes, _ := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	cidrs := map[string]bool{}
	for _, n := range nodes.Items {
		cidrs[n.Spec.PodCIDR] = true
	}
	if len(cidrs) != 4 {
		t.Errorf("the nodes' pod ranges are not four different ones: %v", cidrs)
	}
	keys, _ := filepath.Glob(filepath.Join(workerDir, "bootstrap", "*.key"))
	for _, k := range keys {
		if b := filepath.Base(k); b != "node-client.key" && b != "node-serving.key" {
			t.Errorf("the worker holds a key of the cluster's: %s", k)
		}
	}

	// Secrets are encrypted in etcd with the key every server shares: one
	// written through a joined server reads back through the first.
	if out, err := spKubectl(ctx, bin, servers[1].kubeconfig(), "create", "secret", "generic", "enc", "--from-literal=k=plain-value"); err != nil {
		t.Fatalf("kubectl create secret: %v\n%s", err, out)
	}
	if out, err := spKubectl(ctx, bin, servers[0].kubeconfig(), "get", "secret", "enc", "-o", "jsonpath={.data.k}"); err != nil || strings.TrimSpace(out) != "cGxhaW4tdmFsdWU=" {
		t.Errorf("the secret through the first server: %v, %q", err, out)
	}
	if cli, err := etcdClient(servers[0].dataDir, "https://"+servers[0].ip+":2379"); err != nil {
		t.Error(err)
	} else {
		resp, err := cli.Get(ctx, "/registry/secrets/default/enc")
		cli.Close()
		stored := ""
		if err == nil && len(resp.Kvs) == 1 {
			stored = string(resp.Kvs[0].Value)
		}
		if !strings.HasPrefix(stored, "k8s:enc:secretbox:v1:key1:") || strings.Contains(stored, "plain-value") {
			t.Errorf("the secret in etcd is not encrypted with secretbox key1: %v %q", err, stored)
		}
	}

	// A Deployment spread over the three nodes.
	spread := `apiVersion: apps/v1
kind: Deployment
metadata: {name: spread, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: spread}}}
      containers:
      - {name: c, image: ` + testimage.BusyboxName + `, imagePullPolicy: Never, command: [sh, -c, "echo hello from $NODE; cd /tmp && echo $NODE > index.html && exec httpd -f -vv -p 8080"],
         env: [{name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]}
`
	if out, err := spKubectlIn(ctx, bin, servers[0].kubeconfig(), spread, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	testup.WaitFor(t, ctx, 3*time.Minute, "the Deployment's pods running on four nodes", func() (bool, string) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
		if err != nil {
			return false, err.Error()
		}
		on := map[string]bool{}
		var states []string
		for _, p := range pods.Items {
			states = append(states, p.Spec.NodeName+":"+string(p.Status.Phase))
			if p.Status.Phase == "Running" {
				on[p.Spec.NodeName] = true
			}
		}
		return len(on) == 4, strings.Join(states, " ")
	})
	// kubectl logs reaches the worker's node API (its serving certificate
	// came by a request the servers approved).
	pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=spread", FieldSelector: "spec.nodeName=w4"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the pod on the worker: %v, %v", pods, err)
	}
	if out, err := spKubectl(ctx, bin, servers[0].kubeconfig(), "logs", pods.Items[0].Name); err != nil || !strings.Contains(out, "hello from w4") {
		t.Errorf("kubectl logs of the pod on the worker: %v\n%s", err, out)
	}

	// Pods reach pods on other nodes, by address and without NAT: each
	// node routes the others' pod ranges through their addresses.
	all, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
	if err != nil {
		t.Fatal(err)
	}
	onWorker := pods.Items[0]
	for _, p := range all.Items {
		if p.Spec.NodeName == onWorker.Spec.NodeName {
			continue
		}
		// nc, not wget: Debian's static busybox wget dies of SIGSEGV in a
		// network namespace.
		var out string
		for i := 0; ; i++ {
			out, err = spKubectl(ctx, bin, servers[0].kubeconfig(), "exec", onWorker.Name, "--", "sh", "-c", `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 `+p.Status.PodIP+" 8080")
			if err == nil && strings.HasSuffix(strings.TrimSpace(out), "\n"+p.Spec.NodeName) {
				break
			}
			if i == 8 {
				for h := range 4 {
					name, args := nw.NSEnter(h, "diag", "sh", "-c", "ip route; iptables -t nat -S POSTROUTING; iptables -t nat -S STEADYPLANE-POD-PEERS; sysctl net.ipv4.ip_forward net.ipv4.conf.all.rp_filter net.ipv4.conf.eth0.rp_filter; ip neigh")
					diag, _ := exec.CommandContext(ctx, name, args...).CombinedOutput()
					t.Logf("host %d:\n%s", h, diag)
				}
				t.Fatalf("the pod on the worker does not reach the pod on %s at %s: %v\n%s", p.Spec.NodeName, p.Status.PodIP, err, out)
			}
			time.Sleep(time.Second)
		}
		// httpd -vv logs each caller's address, IPv4-mapped on its
		// dual-stack socket.
		if logs, err := spKubectl(ctx, bin, servers[0].kubeconfig(), "logs", p.Name); err != nil || !strings.Contains(logs, "[::ffff:"+onWorker.Status.PodIP+"]:") && !strings.Contains(logs, "\n"+onWorker.Status.PodIP+":") {
			t.Errorf("the pod on %s did not see the worker pod's address %s (NAT between pods?): %v\n%s", p.Spec.NodeName, onWorker.Status.PodIP, err, logs)
		}
	}
	t.Logf("the pod on the worker reached the pods on the three servers by their addresses")

	// Services route on the worker too: its kube-proxy (a static pod of
	// its agent, with the node's own credentials) rewrites a cluster IP to
	// the pods behind it. What it did not rewrite is dropped there.
	undrop, err := nw.DropServiceRange(walk.worker.host, testup.ServiceCIDR)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(undrop)
	service := `apiVersion: v1
kind: Service
metadata: {name: spread, namespace: default}
spec: {selector: {app: spread}, ports: [{port: 80, targetPort: 8080}]}
`
	if out, err := spKubectlIn(ctx, bin, servers[0].kubeconfig(), service, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply the Service: %v\n%s", err, out)
	}
	clusterIP, err := spKubectl(ctx, bin, servers[0].kubeconfig(), "get", "service", "spread", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		t.Fatalf("the Service's cluster IP: %v\n%s", err, clusterIP)
	}
	// Two of its four pods answering: one at least is on another node.
	reached := map[string]bool{}
	var last string
	for i := 0; i < 30 && len(reached) < 2; i++ {
		out, err := spKubectl(ctx, bin, servers[0].kubeconfig(), "exec", onWorker.Name, "--", "sh", "-c", `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 `+clusterIP+" 80")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err == nil && strings.HasPrefix(out, "HTTP/1.") {
			reached[lines[len(lines)-1]] = true
		} else {
			last = fmt.Sprintf("%v: %s", err, out)
			time.Sleep(time.Second)
		}
	}
	if len(reached) < 2 {
		proxyLog, _ := spKubectl(ctx, bin, servers[0].kubeconfig(), "logs", "-n", "kube-system", "kube-proxy-w4", "--tail", "30")
		t.Fatalf("the pod on the worker reached the Service %s's pods on %v only; last failure %s\nkube-proxy on the worker:\n%s", clusterIP, reached, last, proxyLog)
	}
	t.Logf("the pod on the worker reached the Service %s, answered by the pods on %v", clusterIP, slices.Sorted(maps.Keys(reached)))

	// The worker's pods resolve Services by name: its agent took the
	// cluster DNS's address and domain from the kube-dns Service.
	name := "spread.default.svc.cluster.local"
	var answer string
	for i := 0; i < 30; i++ {
		answer, err = spKubectl(ctx, bin, servers[0].kubeconfig(), "exec", onWorker.Name, "--", "nslookup", name)
		if err == nil && strings.Contains(answer, name) && strings.Contains(answer, clusterIP) {
			break
		}
		if i == 29 {
			conf, _ := spKubectl(ctx, bin, servers[0].kubeconfig(), "exec", onWorker.Name, "--", "cat", "/etc/resolv.conf")
			dns, _ := spKubectl(ctx, bin, servers[0].kubeconfig(), "get", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns", "-o", "wide")
			t.Fatalf("the pod on the worker does not resolve %s to %s: %v\n%s\nits resolv.conf:\n%s\nCoreDNS:\n%s", name, clusterIP, err, answer, conf, dns)
		}
		time.Sleep(time.Second)
	}
	t.Logf("the pod on the worker resolved %s:\n%s", name, answer)
	// Every server runs the readiness-gate webhook for its own API server;
	// one controller sets the conditions.
	gateHolder := gatesOnEveryServer(t, ctx, servers, "")
	if conf, err := spKubectl(ctx, bin, servers[0].kubeconfig(), "exec", onWorker.Name, "--", "cat", "/etc/resolv.conf"); err != nil || !strings.Contains(conf, "search default.svc.cluster.local svc.cluster.local cluster.local") {
		t.Errorf("the worker pod's resolv.conf lacks the cluster's search path: %v\n%s", err, conf)
	}

	// The walkthrough takes a server out, from the first one's directory,
	// once up stopped there; then it joins again from a new data directory.
	g := slices.IndexFunc(servers, func(s *server) bool { return s.name == walk.removeNode.name })
	if g < 1 {
		t.Fatalf("the README removes %q, which is not a joined server's Node", walk.removeNode.name)
	}
	gone := servers[g]
	gone.up.Stop(t)
	removeCmd := hostCmd(ctx, 0, walk.removeNode.line)
	if out, err := removeCmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "removed "+gone.name+"'s etcd member") {
		t.Fatalf("the README's %q: %v\n%s", walk.removeNode.line, err, out)
	}
	var stay []string
	for _, s := range servers {
		if s != gone {
			stay = append(stay, s.name)
		}
	}
	if members, err := etcdMembers(); err != nil || !slices.Equal(members, voters(stay...)) {
		t.Errorf("etcd members after remove-node: %v, %v", members, err)
	}
	testup.WaitFor(t, ctx, time.Minute, gone.name+" gone from the Nodes and the API servers", func() (bool, string) {
		eps, err := client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
		if err != nil {
			return false, err.Error()
		}
		_, nodeErr := client.CoreV1().Nodes().Get(ctx, gone.name, metav1.GetOptions{})
		var addrs []string
		for _, e := range eps.Items {
			for _, ep := range e.Endpoints {
				addrs = append(addrs, ep.Addresses...)
			}
		}
		return len(addrs) == 2 && !slices.Contains(addrs, gone.ip) && nodeErr != nil, fmt.Sprintf("API servers %v, Node %s: %v", addrs, gone.name, nodeErr)
	})
	name, args := nw.NSEnter(g, gone.host, bin, "cleanup", "--data-dir", gone.dataDir, "--remove-data")
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		t.Fatalf("steadyplane cleanup --remove-data: %v\n%s", err, out)
	}
	gone.importBusybox(t)
	begun = time.Now()
	start(g, walk.joins[g-1].line)
	gone.up.WaitUp(t, 5*time.Minute)
	t.Logf("the removed server joined again in %.1fs", time.Since(begun).Seconds())
	if members, err := etcdMembers(); err != nil || !slices.Equal(members, voters(servers[0].name, servers[1].name, servers[2].name)) {
		t.Errorf("etcd members after %s joined again: %v, %v", gone.name, members, err)
	}

	rollRevisionsAcrossServers(t, ctx, servers[0].kubeconfig(), []string{servers[0].name, servers[1].name, servers[2].name})

	// A snapshot, taken on the joined server that the reset below leaves
	// lost, of data that the writes after it will not be in; restored at
	// the end on the survivor.
	// Written through another server, the ConfigMap is in the snapshot at
	// once: a save reads through its member linearizably first.
	snapshotter := 3 - walk.reset.host
	if out, err := spKubectl(ctx, bin, servers[0].kubeconfig(), "create", "configmap", "in-snapshot"); err != nil {
		t.Fatalf("a write before the snapshot: %v\n%s", err, out)
	}
	name, args = nw.NSEnter(snapshotter, servers[snapshotter].host, bin, "etcd-snapshot", "save", "--data-dir", servers[snapshotter].dataDir)
	var saveErr strings.Builder
	save := exec.CommandContext(ctx, name, args...)
	save.Stderr = &saveErr
	saved, err := save.Output()
	snapshot := strings.TrimSpace(string(saved))
	if err != nil || !strings.HasSuffix(snapshot, ".db") {
		t.Fatalf("steadyplane etcd-snapshot save on %s: %v\n%s%s", servers[snapshotter].name, err, saved, saveErr.String())
	}

	// The first server black-holed (its link down: nothing answers, not
	// even a reset), under a client-go reader on its admin kubeconfig:
	// reads move on after the hedge delay, kubectl reads and writes.
	holeReader := startReader(t, ctx, servers[0].kubeconfig())
	time.Sleep(2 * time.Second)
	if err := nw.BlackHole(0); err != nil {
		t.Fatal(err)
	}
	holed := time.Now()
	if out, err := spKubectl(ctx, bin, servers[0].kubeconfig(), "get", "nodes", "-o", "name"); err != nil || strings.Count(out, "node/") != 4 {
		t.Errorf("steadyplane kubectl get nodes, first server black-holed: %v\n%s", err, out)
	}
	if out, err := spKubectl(ctx, bin, servers[0].kubeconfig(), "create", "configmap", "during-black-hole"); err != nil {
		t.Errorf("steadyplane kubectl create configmap, first server black-holed: %v\n%s", err, out)
	}
	t.Logf("first server black-holed: kubectl read and wrote in %.1fs", time.Since(holed).Seconds())
	time.Sleep(5 * time.Second)
	reads, failed, gap := holeReader()
	t.Logf("client-go reader across the black hole: %d reads, %d failed, longest gap %v", reads, failed, gap)
	// Without hedged reads the gap is the HTTP/2 health check's 4s at least.
	if failed > 0 || reads < 10 || gap > 3*time.Second {
		t.Errorf("the client-go reader saw %d failed reads of %d and a gap of %v while the first server was black-holed; want none and under 3s", failed, reads, gap)
	}
	if err := nw.Restore(0); err != nil {
		t.Fatal(err)
	}
	direct, err := clientcmd.BuildConfigFromFlags("", servers[0].kubeconfig()) // that server alone
	if err != nil {
		t.Fatal(err)
	}
	direct.Timeout = 5 * time.Second
	directClient := kubernetes.NewForConfigOrDie(direct)
	testup.WaitFor(t, ctx, 2*time.Minute, "the first server ready again after its link came back", func() (bool, string) {
		body, err := directClient.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, fmt.Sprint(string(body), err)
	})

	// A client-go program reads throughout, through the first server's
	// admin kubeconfig (which names that server).
	reader := startReader(t, ctx, servers[0].kubeconfig())

	// Kill -9 the API server the admin kubeconfig names.
	apiserver := procfs.Find(func(argv []string) bool {
		return len(argv) > 1 && argv[1] == "apiserver" && strings.Contains(strings.Join(argv, " "), servers[0].dataDir)
	})
	if len(apiserver) == 0 {
		t.Fatal("the first server's API server process was not found")
	}
	for _, pid := range apiserver {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	killed := time.Now()
	var holderAtKill string
	for i, cm := range []string{"after-apiserver-kill", "after-host-kill"} {
		if i == 1 {
			holderAtKill = gateHolderNow(t, ctx, servers[1].kubeconfig())
			// Then the whole host, up and node agent and all.
			n := nw.KillAll(0)
			killed = time.Now()
			t.Logf("killed %d processes on %s", n, servers[0].name)
		}
		if out, err := spKubectl(ctx, bin, servers[0].kubeconfig(), "get", "nodes", "-o", "name"); err != nil || strings.Count(out, "node/") != 4 {
			t.Errorf("steadyplane kubectl get nodes (%s): %v\n%s", cm, err, out)
		}
		if out, err := spKubectl(ctx, bin, servers[0].kubeconfig(), "create", "configmap", cm); err != nil {
			t.Errorf("steadyplane kubectl create configmap (%s): %v\n%s", cm, err, out)
		}
		t.Logf("%s: kubectl read and wrote %.1fs after the kill", cm, time.Since(killed).Seconds())
	}
	kubectlAnywhere("after the first server's host was killed")
	// With the first server gone, the gate's controller is on another
	// (it had to hand over if it ran there).
	after := gatesOnEveryServer(t, ctx, servers[1:], "-after")
	switch {
	case after == servers[0].name:
		t.Errorf("the gate's controller is still %s, whose host was killed", after)
	case holderAtKill == servers[0].name:
		t.Logf("the gate's controller moved from %s, whose host was killed, to %s (first holder %s)", holderAtKill, after, gateHolder)
	default:
		// It moved before (the first server black-holed longer than the
		// lease's renew deadline); the kill tested no handover.
		t.Logf("the gate's controller was %s when the first server's host was killed, %s after (first holder %s)", holderAtKill, after, gateHolder)
	}
	time.Sleep(3 * time.Second)
	// The other servers' API servers kept running through it.
	for _, s := range servers[1:] {
		pod := "kube-apiserver-" + s.name
		out, err := spKubectl(ctx, bin, servers[1].kubeconfig(), "get", "pod", "-n", "kube-system", pod, "-o", "jsonpath={.status.containerStatuses[0].restartCount}")
		if err != nil || strings.TrimSpace(out) != "0" {
			prev, _ := spKubectl(ctx, bin, servers[1].kubeconfig(), "logs", "-n", "kube-system", pod, "--previous", "--tail", "40")
			t.Errorf("%s restarted when the first server died (restarts %q, %v); its previous run ended with:\n%s", pod, out, err, prev)
		}
	}
	reads, failed, gap = reader()
	t.Logf("client-go reader: %d reads, %d failed, longest gap %v", reads, failed, gap)
	if failed > 0 || reads < 10 {
		t.Errorf("the client-go reader saw %d failed reads of %d", failed, reads)
	}

	// Two of three lost: the API says so; the walkthrough's cluster reset
	// brings the survivor back with its data.
	survivor := servers[walk.reset.host]
	lost := servers[3-walk.reset.host]
	n := nw.KillAll(3 - walk.reset.host)
	t.Logf("killed %d processes on %s: one server of three left", n, lost.host)
	out, err := spKubectl(ctx, bin, survivor.kubeconfig(), "--request-timeout=15s", "create", "configmap", "without-quorum")
	t.Logf("a write without etcd quorum: %v\n%s", err, out)
	if err == nil {
		t.Errorf("a write succeeded with one etcd member of three")
	}
	survivor.up.Stop(t)
	begun = time.Now()
	if out, err := hostCmd(ctx, walk.reset.host, walk.reset.line, upExtra...).CombinedOutput(); err != nil || !strings.Contains(string(out), "cluster reset done") {
		t.Fatalf("the README's %q: %v\n%s", walk.reset.line, err, out)
	}
	start(walk.reset.host, walk.reset.then)
	survivor.up.WaitUp(t, 5*time.Minute)
	t.Logf("the survivor is up again after a cluster reset in %.1fs", time.Since(begun).Seconds())
	if out, err := spKubectl(ctx, bin, survivor.kubeconfig(), "get", "configmap", "after-host-kill", "-o", "name"); err != nil || !strings.Contains(out, "configmap/after-host-kill") {
		t.Errorf("data written before the loss, after the reset: %v\n%s", err, out)
	}
	if out, err := spKubectl(ctx, bin, survivor.kubeconfig(), "create", "configmap", "after-reset"); err != nil {
		t.Errorf("a write after the reset: %v\n%s", err, out)
	}
	restoreOnThreeServers(t, ctx, nw, bin, survivor, lost, snapshot, func(line string) {
		start(walk.reset.host, line)
	}, func(ctx context.Context, line string) *exec.Cmd {
		return hostCmd(ctx, walk.reset.host, line, upExtra...)
	}, func(line string) {
		// The walkthrough's join line of the lost server, to the survivor.
		start(3-walk.reset.host, strings.ReplaceAll(line, "10.0.0.1:6443", fmt.Sprintf("10.0.0.%d:6443", walk.reset.host+1)))
	}, walk.reset.then, walk.joins[2-walk.reset.host].line)
	// Stopped while both run; the last, without etcd's quorum, would take
	// every component's grace period in turn: killed, then cleaned up.
	survivor.up.Stop(t)
	lost.up.Kill(t)
}

// restoreOnThreeServers restores snapshot, taken on lost, on survivor (up
// stopped there, every other server's etcd dead), as the README's Backups
// say: up --cluster-reset --cluster-reset-restore-path with up's flags,
// then up; the survivor has the snapshot's data and is a cluster of one,
// and lost joins it again from a clean data directory with a token the
// survivor makes. startSurvivor runs up's line on the survivor, onSurvivor
// a command there with up's flags, rejoinLost the join line on lost.
func restoreOnThreeServers(t *testing.T, ctx context.Context, nw *testenv.Network, bin string, survivor, lost *server, snapshot string,
	startSurvivor func(line string), onSurvivor func(ctx context.Context, line string) *exec.Cmd, rejoinLost func(line string), upLine, joinLine string) {
	t.Helper()
	survivor.up.Stop(t)
	// The snapshot goes to the survivor's machine, its record with it;
	// the lost server's data directory is then emptied.
	copied := filepath.Join(survivor.dir, filepath.Base(snapshot))
	for _, ext := range []string{".db", ".json"} {
		b, err := os.ReadFile(strings.TrimSuffix(snapshot, ".db") + ext)
		if err == nil {
			err = os.WriteFile(strings.TrimSuffix(copied, ".db")+ext, b, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	name, args := nw.NSEnter(lost.index, lost.host, bin, "cleanup", "--data-dir", lost.dataDir, "--remove-data")
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		t.Fatalf("steadyplane cleanup --remove-data on %s: %v\n%s", lost.name, err, out)
	}

	begun := time.Now()
	restore := onSurvivor(ctx, upLine+" --cluster-reset --cluster-reset-restore-path "+copied)
	if out, err := restore.CombinedOutput(); err != nil || !strings.Contains(string(out), "etcd runs on the snapshot's data") {
		t.Fatalf("the restore on %s: %v\n%s", survivor.name, err, out)
	}
	startSurvivor(upLine)
	survivor.up.WaitUp(t, 5*time.Minute)
	t.Logf("%s up on a snapshot taken on %s in %.1fs", survivor.name, lost.name, time.Since(begun).Seconds())
	for cm, want := range map[string]bool{"in-snapshot": true, "after-host-kill": false, "after-reset": false} {
		out, err := spKubectl(ctx, bin, survivor.kubeconfig(), "get", "configmap", cm, "--ignore-not-found", "-o", "name")
		if err != nil || strings.Contains(out, "configmap/"+cm) != want {
			t.Errorf("after the restore, ConfigMap %s: %q, %v; want it there: %v", cm, out, err, want)
		}
	}
	members := func() ([]string, error) { return etcdMemberList(ctx, survivor) }
	if m, err := members(); err != nil || !slices.Equal(m, []string{survivor.name + " learner=false"}) {
		t.Errorf("etcd members after the restore: %v, %v; want %s alone", m, err, survivor.name)
	}

	// The lost server joins again, from a clean data directory, with a
	// server token the survivor makes.
	name, args = nw.NSEnter(survivor.index, survivor.host, bin, "token", "create", "--server", "--ttl", "1h", "--data-dir", survivor.dataDir)
	token, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		t.Fatalf("steadyplane token create on %s: %v\n%s", survivor.name, err, token)
	}
	lost.importBusybox(t)
	if err := os.WriteFile(filepath.Join(lost.dir, "token"), token, 0o600); err != nil {
		t.Fatal(err)
	}
	begun = time.Now()
	rejoinLost(joinLine)
	lost.up.WaitUp(t, 5*time.Minute)
	t.Logf("%s joined the restored %s again in %.1fs", lost.name, survivor.name, time.Since(begun).Seconds())
	want := []string{lost.name + " learner=false", survivor.name + " learner=false"}
	slices.Sort(want)
	client := testup.HAClient(t, survivor.kubeconfig())
	testup.WaitFor(t, ctx, 2*time.Minute, "two voting etcd members and both servers' Nodes Ready", func() (bool, string) {
		m, err := members()
		ready := testenv.ReadyNodes(ctx, client)
		// The snapshot has the lost server's Node Ready already: the
		// heartbeat must be of its new agent.
		var beat time.Time
		if n, err := client.CoreV1().Nodes().Get(ctx, lost.name, metav1.GetOptions{}); err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					beat = c.LastHeartbeatTime.Time
				}
			}
		}
		return err == nil && slices.Equal(m, want) && slices.Contains(ready, lost.name) && slices.Contains(ready, survivor.name) && beat.After(begun),
			fmt.Sprintf("etcd members %v (%v), Ready nodes %v, %s's last heartbeat %v", m, err, ready, lost.name, beat)
	})
	if out, err := spKubectl(ctx, bin, lost.kubeconfig(), "get", "configmap", "in-snapshot", "-o", "name"); err != nil || !strings.Contains(out, "configmap/in-snapshot") {
		t.Errorf("the server that joined again does not read the restored data: %v\n%s", err, out)
	}
	if out, err := spKubectl(ctx, bin, lost.kubeconfig(), "create", "configmap", "after-restore"); err != nil {
		t.Errorf("a write on the restored cluster of two: %v\n%s", err, out)
	}
}

// etcdMemberList lists the members of s's etcd cluster, each as "<name>
// learner=<bool>", sorted, asking s's member.
func etcdMemberList(ctx context.Context, s *server) ([]string, error) {
	cli, err := etcdClient(s.dataDir, "https://"+s.ip+":2379")
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.MemberList(cctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range resp.Members {
		out = append(out, fmt.Sprintf("%s learner=%v", m.Name, m.IsLearner))
	}
	slices.Sort(out)
	return out, nil
}

// threeServers is the README's "Three servers, no load balancer"
// walkthrough: its command lines, each with the index of the host it runs
// on (10.0.0.1 is host 0).
type threeServers struct {
	first   readmeStep
	joins   []readmeStep
	worker  readmeStep
	kubectl readmeStep
	// removeNode names the Node it takes out.
	removeNode readmeStep
	// reset is "up --cluster-reset", then the up that follows it.
	reset readmeStep
}

// readmeStep is one command line of a README walkthrough.
type readmeStep struct {
	line, then, name string
	host             int
}

var readmeHost = regexp.MustCompile(`10\.0\.0\.(\d+)`)

// parseThreeServers finds the walkthrough's steps in block, refusing a
// block this test would not run as written: a missing or extra step, shell
// syntax beyond one "&&", a host other than the test's.
func parseThreeServers(block string) (threeServers, error) {
	var w threeServers
	hostOf := func(line, flag string) (int, error) {
		_, v, ok := strings.Cut(line, flag+" ")
		m := readmeHost.FindStringSubmatch(v)
		if !ok || m == nil || !strings.HasPrefix(v, m[0]) {
			return 0, fmt.Errorf("%q: no %s 10.0.0.N", line, flag)
		}
		n, _ := strconv.Atoi(m[1])
		if n < 1 || n > 4 {
			return 0, fmt.Errorf("%q: host %d; the test has hosts 1 to 4", line, n)
		}
		return n - 1, nil
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		for _, m := range readmeHost.FindAllStringSubmatch(line, -1) {
			if n, _ := strconv.Atoi(m[1]); n < 1 || n > 4 {
				return w, fmt.Errorf("%q: host %s; the test has hosts 1 to 4", line, m[0])
			}
		}
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, "'\"$|;<>`\\*?#") {
			return w, fmt.Errorf("%q: shell syntax the test does not run", line)
		}
		cmds := strings.Split(line, " && ")
		if len(cmds) > 2 || len(cmds) == 2 && !strings.Contains(line, "--cluster-reset") || strings.Contains(line, "&") && len(cmds) == 1 {
			return w, fmt.Errorf("%q: only the cluster reset is followed by && up", line)
		}
		if !strings.HasPrefix(line, "steadyplane ") {
			return w, fmt.Errorf("%q: not a steadyplane command", line)
		}
		var err error
		step := readmeStep{line: cmds[0]}
		kind := ""
		switch {
		case strings.HasPrefix(line, "steadyplane kubectl "):
			kind, w.kubectl = "kubectl", step
		case strings.HasPrefix(line, "steadyplane remove-node "):
			f := strings.Fields(line)
			step.name = f[len(f)-1]
			kind, w.removeNode = "remove-node", step
		case strings.HasPrefix(line, "steadyplane node "):
			step.host, err = hostOf(line, "--node-ip")
			kind, w.worker = "node", step
		case strings.Contains(line, "--cluster-reset"):
			if len(cmds) != 2 {
				return w, fmt.Errorf("%q: the reset is followed by && up", line)
			}
			step.then = cmds[1]
			step.host, err = hostOf(line, "--bind-address")
			if then, _ := hostOf(cmds[1], "--bind-address"); err == nil && (!strings.HasPrefix(cmds[1], "steadyplane up ") || then != step.host) {
				return w, fmt.Errorf("%q: the reset is not followed by up on the same host", line)
			}
			kind, w.reset = "reset", step
		case strings.HasPrefix(line, "steadyplane up ") && strings.Contains(line, "--server "):
			step.host, err = hostOf(line, "--bind-address")
			w.joins = append(w.joins, step)
		case strings.HasPrefix(line, "steadyplane up "):
			step.host, err = hostOf(line, "--bind-address")
			kind, w.first = "first", step
		default:
			return w, fmt.Errorf("%q: not a step of the walkthrough", line)
		}
		if err != nil {
			return w, err
		}
		if kind != "" && seen[kind] {
			return w, fmt.Errorf("%q: a second %s step", line, kind)
		}
		seen[kind] = true
	}
	switch {
	case !seen["first"] || !seen["node"] || !seen["kubectl"] || !seen["remove-node"] || !seen["reset"]:
		return w, fmt.Errorf("steps missing: have %v", seen)
	case w.first.host != 0:
		return w, fmt.Errorf("the first server is not on 10.0.0.1")
	case len(w.joins) != 2 || w.joins[0].host != 1 || w.joins[1].host != 2:
		return w, fmt.Errorf("want servers joining on 10.0.0.2 and 10.0.0.3, have %v", w.joins)
	case w.worker.host != 3:
		return w, fmt.Errorf("the worker is not on 10.0.0.4")
	case w.reset.host != 1 && w.reset.host != 2:
		return w, fmt.Errorf("the cluster reset is not on a joined server")
	}
	return w, nil
}

// onHosts puts the test network's addresses where line says 10.0.0.N.
func (threeServers) onHosts(line string, nw *testenv.Network) string {
	return readmeHost.ReplaceAllStringFunc(line, func(m string) string {
		n, _ := strconv.Atoi(readmeHost.FindStringSubmatch(m)[1])
		return nw.Hosts[n-1].IP.String()
	})
}

// etcdClient reaches endpoint with the API server's etcd credentials of dataDir.
func etcdClient(dataDir, endpoint string) (*clientv3.Client, error) {
	pkiDir := filepath.Join(dataDir, "pki")
	pair, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "apiserver-etcd-client.crt"), filepath.Join(pkiDir, "apiserver-etcd-client.key"))
	if err != nil {
		return nil, err
	}
	roots, err := certutil.NewPool(filepath.Join(pkiDir, "etcd-ca.crt"))
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second,
		TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}})
}

// startReader reads the default namespace every 100ms through kubeconfig
// until the returned function is called, which reports the reads, the
// failed ones and the longest time between two successful reads.
func startReader(t *testing.T, ctx context.Context, kubeconfig string) func() (reads, failed int, gap time.Duration) {
	client := testup.HAClient(t, kubeconfig)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var n, bad int
	var longest time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := time.Now()
		for i := 0; i < 100000; i++ {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			_, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			mu.Lock()
			n++
			if err != nil {
				bad++
				t.Logf("reader: %v", err)
			} else {
				longest = max(longest, time.Since(last))
				last = time.Now()
			}
			mu.Unlock()
		}
	}()
	return func() (int, int, time.Duration) {
		close(stop)
		wg.Wait()
		return n, bad, longest
	}
}

// spKubectl runs "steadyplane kubectl" (failover between the servers the
// kubeconfig lists).
func spKubectl(ctx context.Context, bin, kubeconfig string, args ...string) (string, error) {
	return spKubectlIn(ctx, bin, kubeconfig, "", args...)
}

func spKubectlIn(ctx context.Context, bin, kubeconfig, stdin string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, append([]string{"kubectl", "--kubeconfig", kubeconfig, "--request-timeout=30s"}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+os.TempDir())
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	// Its log lines (a failover) are on stderr; stdout is the answer.
	return string(out), nil
}
