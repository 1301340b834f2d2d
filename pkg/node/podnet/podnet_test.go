package podnet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
)

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

func TestCheckFree(t *testing.T) {
	routes := []Route{
		{Dev: "eth0", Dst: mustCIDR("0.0.0.0/0")},
		{Dev: "eth0", Dst: mustCIDR("192.0.2.0/24")},
		{Dev: "docker0", Dst: mustCIDR("172.17.0.0/16")},
		{Dev: "sp0", Dst: mustCIDR("10.244.0.0/24")},
	}
	cases := []struct {
		cidr    string
		wantErr string
	}{
		{"10.244.0.0/24", ""},              // our own bridge's route
		{"10.245.0.0/24", ""},              // free
		{"192.0.2.128/25", "192.0.2.0/24"}, // inside a route
		{"172.0.0.0/8", "172.17.0.0/16"},   // contains a route
		{"nonsense", "pod CIDR"},
	}
	for _, tc := range cases {
		err := CheckFree(tc.cidr, routes, "sp0")
		if (tc.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: %v, want error containing %q", tc.cidr, err, tc.wantErr)
		}
	}
}

func TestParseRoutes(t *testing.T) {
	in := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
		"eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
	routes, err := parseRoutes(bufio.NewScanner(strings.NewReader(in)))
	if err != nil || len(routes) != 2 || routes[1].Dst.String() != "192.0.2.0/24" || routes[0].Dst.String() != "0.0.0.0/0" {
		t.Fatalf("routes %v, %v", routes, err)
	}
	if _, err := parseRoutes(bufio.NewScanner(strings.NewReader("h\neth0 zz 0 0 0 0 0 00FFFFFF\n"))); err == nil {
		t.Error("a malformed line was accepted")
	}
}

func TestConflist(t *testing.T) {
	type plugins struct {
		Plugins []map[string]any
	}
	cases := []struct {
		name      string
		cfg       Config
		hostPorts bool
		// types are the plugins, in order; ipMasq the bridge's.
		types  []string
		ipMasq bool
	}{
		{"NAT, a pod with hostPorts: portmap after the bridge; the node masquerades", Config{PodCIDR: "10.244.3.0/24", Bridge: "sp0", IPAMDir: "/r/ipam", NAT: true}, true, []string{"bridge", "portmap"}, false},
		{"NAT, a pod without: the bridge alone", Config{PodCIDR: "10.244.3.0/24", Bridge: "sp0", IPAMDir: "/r/ipam", NAT: true}, false, []string{"bridge"}, false},
		{"NAT on IPv6: the bridge masquerades (the node's rule is IPv4's)", Config{PodCIDR: "fd00:10::/64", Bridge: "sp0", IPAMDir: "/r/ipam", NAT: true}, false, []string{"bridge"}, true},
		{"without iptables: no portmap, no masquerade", Config{PodCIDR: "10.244.3.0/24", Bridge: "sp0", IPAMDir: "/r/ipam"}, true, []string{"bridge"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := Conflist(c.cfg, c.hostPorts)
			if err != nil {
				t.Fatal(err)
			}
			var got plugins
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, p := range got.Plugins {
				types = append(types, p["type"].(string))
			}
			if strings.Join(types, ",") != strings.Join(c.types, ",") || got.Plugins[0]["ipMasq"] != c.ipMasq {
				t.Errorf("plugins %v, bridge ipMasq %v; want %v, %v\n%s", types, got.Plugins[0]["ipMasq"], c.types, c.ipMasq, b)
			}
			if !strings.Contains(string(b), `"subnet": "`+c.cfg.PodCIDR+`"`) || !strings.Contains(string(b), `"dataDir": "/r/ipam"`) || !strings.Contains(string(b), `"name": "steadyplane"`) {
				t.Errorf("%s", b)
			}
		})
	}
	for _, bad := range []Config{{PodCIDR: "10.0.0.1/32", Bridge: "b"}, {PodCIDR: "x", Bridge: "b"}, {PodCIDR: "10.0.0.0/24", Bridge: "a-very-long-bridge-name"}} {
		if _, err := Conflist(bad, false); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// testNetwork sets up a pod network on a bridge of the test's own, removed
// at the end.
func testNetwork(t *testing.T, cidr, bridge string) (*Network, *runc.Runtime, string) {
	t.Helper()
	if _, err := runc.Available(); err != nil {
		testci.CannotRun(t, "pod network: %v", err)
	}
	dir := t.TempDir()
	n, err := New(Config{PodCIDR: cidr, Bridge: bridge, IPAMDir: filepath.Join(dir, "ipam"), NAT: IPTablesAvailable()}, filepath.Join(dir, "net.conflist"), filepath.Join(dir, "cache"))
	if err != nil {
		testci.CannotRun(t, "pod network: %v", err)
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", bridge).Run()
		if n.NAT() {
			_ = RemoveMasquerade(utiliptables.New(utiliptables.ProtocolIPv4), cidr)
		}
	})
	r, err := runc.New(runc.Options{Root: filepath.Join(dir, "runc"), ExitHook: []string{"unused"}})
	if err != nil {
		t.Fatal(err)
	}
	return n, r, dir
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}}
}

func TestPodNetwork(t *testing.T) {
	n, r, dir := testNetwork(t, "10.251.7.0/24", "sptest7")
	ctx := context.Background()
	ips := map[string]string{}
	netns := map[string]string{}
	for _, name := range []string{"a", "b"} {
		sb, err := r.CreateSandbox(name, filepath.Join(dir, name), name, false)
		if err != nil {
			t.Fatal(err)
		}
		defer r.RemoveSandbox(sb)
		got, err := n.Setup(ctx, testPod(name), name, sb.NetNS)
		if err != nil {
			t.Fatal(err)
		}
		defer n.Teardown(ctx, testPod(name), name, sb.NetNS)
		if !mustCIDR("10.251.7.0/24").Contains(got[0]) {
			t.Fatalf("pod %s got %v, outside the pod CIDR", name, got)
		}
		ips[name], netns[name] = got[0].String(), sb.NetNS
		// Set up again (a restarted agent): the same address.
		again, err := n.Setup(ctx, testPod(name), name, sb.NetNS)
		if err != nil || again[0].String() != got[0].String() {
			t.Errorf("second Setup of %s: %v %v, want %s kept", name, again, err, got[0])
		}
	}
	if ips["a"] == ips["b"] {
		t.Fatalf("two pods share %s", ips["a"])
	}
	// A server in pod a on port 8080, reached from the host and from pod b.
	srv := exec.Command("nsenter", "--net="+netns["a"], "python3", "-m", "http.server", "8080", "--bind", ips["a"], "--directory", dir)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	url := fmt.Sprintf("http://%s:8080/", ips["a"])
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := (&http.Client{Timeout: time.Second}).Get(url)
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host to pod a: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, err := exec.Command("nsenter", "--net="+netns["b"], "python3", "-c", "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1], timeout=5).status)", url).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "200" {
		t.Errorf("pod b to pod a: %v %s", err, out)
	}
	// A second server on the same port in pod b: no collision.
	srvB := exec.Command("nsenter", "--net="+netns["b"], "python3", "-m", "http.server", "8080", "--bind", ips["b"], "--directory", dir)
	if err := srvB.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srvB.Process.Kill(); _ = srvB.Wait() }()
}

func TestNoAddressLeak(t *testing.T) {
	n, r, dir := testNetwork(t, "10.251.8.0/28", "sptest8") // 13 addresses: a leak shows fast
	ctx := context.Background()
	sb, err := r.CreateSandbox("x", filepath.Join(dir, "x"), "x", false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.RemoveSandbox(sb)
	const cycles = 200
	for i := 0; i < cycles; i++ {
		pod := testPod(fmt.Sprintf("p%d", i))
		if _, err := n.Setup(ctx, pod, string(pod.UID), sb.NetNS); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := n.Teardown(ctx, pod, string(pod.UID), sb.NetNS); err != nil {
			t.Fatalf("cycle %d teardown: %v", i, err)
		}
	}
	leases, _ := os.ReadDir(filepath.Join(dir, "ipam", NetworkName))
	var held []string
	for _, l := range leases {
		if net.ParseIP(l.Name()) != nil {
			held = append(held, l.Name())
		}
	}
	if len(held) != 0 {
		t.Errorf("after %d create/delete cycles, addresses still held: %v", cycles, held)
	}
}

// natRules is the host's nat table as iptables -S prints it.
func natRules(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables", "-t", "nat", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -t nat -S: %v: %s", err, out)
	}
	return string(out)
}

// A pod attached by an earlier agent, whose bridge plugin masqueraded each
// pod with a chain of its own, is detached with that configuration: its
// chain goes. Pods attached now get no chain of their own, hostPorts or
// not, and the node's one rule is there.
func TestAttachmentsKeepTheirConfiguration(t *testing.T) {
	n, r, dir := testNetwork(t, "10.251.9.0/24", "sptest9")
	if !n.NAT() {
		testci.CannotRun(t, "no iptables")
	}
	ctx := context.Background()
	if !strings.Contains(natRules(t), strings.Join(MasqueradeJump("10.251.9.0/24")[:4], " ")) {
		t.Fatalf("no masquerade jump for 10.251.9.0/24:\n%s", natRules(t))
	}
	// The earlier agent's configuration: the bridge masquerades.
	old := *n
	var conf map[string]any
	b, _ := Conflist(n.cfg, false)
	_ = json.Unmarshal(b, &conf)
	conf["plugins"].([]any)[0].(map[string]any)["ipMasq"] = true
	b, _ = json.Marshal(conf)
	var err error
	if old.list, err = libcni.ConfListFromBytes(b); err != nil {
		t.Fatal(err)
	}
	hostPort := testPod("hp")
	hostPort.Spec.Containers = []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 18089}}}}
	attach := func(nw *Network, pod *corev1.Pod) string {
		t.Helper()
		sb, err := r.CreateSandbox(pod.Name, filepath.Join(dir, pod.Name), pod.Name, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.RemoveSandbox(sb) })
		if _, err := nw.Setup(ctx, pod, pod.Name, sb.NetNS); err != nil {
			t.Fatal(err)
		}
		return sb.NetNS
	}
	oldNS := attach(&old, testPod("old"))
	if !strings.Contains(natRules(t), `id: \"old\"`) {
		t.Fatalf("the earlier configuration made no chain for its pod:\n%s", natRules(t))
	}
	newNS, hpNS := attach(n, testPod("new")), attach(n, hostPort)
	rules := natRules(t)
	if strings.Contains(rules, `id: \"new\"`) || strings.Contains(rules, `id: \"hp\" -j CNI-`) {
		t.Errorf("a pod attached now got a masquerade chain of its own:\n%s", rules)
	}
	if !strings.Contains(rules, "18089") {
		t.Errorf("the hostPort of pod hp is not forwarded:\n%s", rules)
	}
	for _, p := range []struct {
		pod   *corev1.Pod
		netns string
	}{{testPod("old"), oldNS}, {testPod("new"), newNS}, {hostPort, hpNS}} {
		if err := n.Teardown(ctx, p.pod, p.pod.Name, p.netns); err != nil {
			t.Errorf("teardown of %s: %v", p.pod.Name, err)
		}
	}
	rules = natRules(t)
	if strings.Contains(rules, `id: \"old\"`) || strings.Contains(rules, "18089") {
		t.Errorf("after teardown, rules of the pods remain:\n%s", rules)
	}
}
