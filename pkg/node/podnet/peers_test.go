package podnet

import (
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/steadyplane/steadyplane/internal/testci"
)

func TestPeerRoutes(t *testing.T) {
	lan := mustCIDR("192.168.50.0/24")
	connected := []*net.IPNet{lan}
	tests := []struct {
		name       string
		peers      []Peer
		want       []string // "dst via"
		unroutable map[string]string
	}{
		{name: "each other node's range through its address, sorted", peers: []Peer{
			{Name: "self", PodCIDRs: []string{"10.244.0.0/24"}, Address: "192.168.50.1"},
			{Name: "c", PodCIDRs: []string{"10.244.2.0/24"}, Address: "192.168.50.3"},
			{Name: "b", PodCIDRs: []string{"10.244.1.0/24"}, Address: "192.168.50.2"},
		}, want: []string{"10.244.1.0/24 via 192.168.50.2", "10.244.2.0/24 via 192.168.50.3"}},
		{name: "no range or no address yet: routed later, no complaint", peers: []Peer{
			{Name: "new", Address: "192.168.50.9"},
			{Name: "bare", PodCIDRs: []string{"10.244.3.0/24"}},
		}},
		{name: "an address on no attached network", peers: []Peer{
			{Name: "far", PodCIDRs: []string{"10.244.4.0/24"}, Address: "172.31.0.4"},
		}, unroutable: map[string]string{"far": "on no network this host is attached to"}},
		{name: "a range overlapping this node's or an attached network", peers: []Peer{
			{Name: "twin", PodCIDRs: []string{"10.244.0.0/16"}, Address: "192.168.50.5"},
			{Name: "lanlike", PodCIDRs: []string{"192.168.50.128/25"}, Address: "192.168.50.6"},
		}, unroutable: map[string]string{"twin": "overlaps this node's", "lanlike": "overlaps a network this host is attached to"}},
		{name: "two nodes claim one range: the first by name gets it, every time", peers: []Peer{
			{Name: "stale", PodCIDRs: []string{"10.244.8.0/24"}, Address: "192.168.50.20"},
			{Name: "fresh", PodCIDRs: []string{"10.244.8.0/24"}, Address: "192.168.50.21"},
		}, want: []string{"10.244.8.0/24 via 192.168.50.21"}, unroutable: map[string]string{"stale": "node fresh's too"}},
		{name: "garbage from the API", peers: []Peer{
			{Name: "badip", PodCIDRs: []string{"10.244.5.0/24"}, Address: "not-an-ip"},
			{Name: "badcidr", PodCIDRs: []string{"10.244.6.0"}, Address: "192.168.50.7"},
		}, unroutable: map[string]string{"badip": "not an IP address", "badcidr": "pod range"}},
		{name: "a range of the other family is left to an address of that family", peers: []Peer{
			{Name: "dual", PodCIDRs: []string{"10.244.7.0/24", "fd00:10:244:7::/64"}, Address: "192.168.50.8"},
		}, want: []string{"10.244.7.0/24 via 192.168.50.8"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			routes, unroutable := PeerRoutes("self", "10.244.0.0/24", tc.peers, connected)
			var got []string
			for _, r := range routes {
				got = append(got, r.Dst.String()+" via "+r.Via.String())
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("routes %v, want %v", got, tc.want)
			}
			if len(unroutable) != len(tc.unroutable) {
				t.Errorf("unroutable %v, want %v", unroutable, tc.unroutable)
			}
			for node, want := range tc.unroutable {
				if !strings.Contains(unroutable[node], want) {
					t.Errorf("unroutable[%s] = %q, want it to say %q", node, unroutable[node], want)
				}
			}
		})
	}
}

func TestPeerRules(t *testing.T) {
	routes, _ := PeerRoutes("a", "10.244.0.0/24", []Peer{{Name: "b", PodCIDRs: []string{"10.244.1.0/24"}, Address: "192.168.50.2"}}, []*net.IPNet{mustCIDR("192.168.50.0/24")})
	want := "*nat\n:STEADYPLANE-POD-PEERS - [0:0]\n-A STEADYPLANE-POD-PEERS -s 10.244.0.0/24 -d 10.244.1.0/24 -j ACCEPT\nCOMMIT\n"
	if got := string(PeerRules("10.244.0.0/24", routes)); got != want {
		t.Errorf("PeerRules:\n%s\nwant:\n%s", got, want)
	}
	// No peers: the chain is emptied, not left with old rules.
	if got := string(PeerRules("10.244.0.0/24", nil)); got != "*nat\n:STEADYPLANE-POD-PEERS - [0:0]\nCOMMIT\n" {
		t.Errorf("PeerRules without peers:\n%s", got)
	}
}

// TestSetPeerRoutes sets routes and rules in a network namespace of its
// own: a node joins, another leaves, and a route someone else made stays.
func TestSetPeerRoutes(t *testing.T) {
	defer enterNetNS(t)()

	// A veth pair (this kernel may lack the dummy module); its peer stays
	// down and addressless.
	dummy := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lan0"}, PeerName: "lan1"}
	if err := netlink.LinkAdd(dummy); err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("192.168.50.1/24")
	if err := netlink.AddrAdd(dummy, addr); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(dummy); err != nil {
		t.Fatal(err)
	}
	connected, err := ConnectedNetworks("cni0")
	if err != nil || len(connected) != 1 || connected[0].String() != "192.168.50.0/24" {
		t.Fatalf("ConnectedNetworks = %v, %v; want lan0's network alone", connected, err)
	}
	// Someone else's route, which must stay.
	if err := netlink.RouteAdd(&netlink.Route{Dst: mustCIDR("10.99.0.0/24"), Gw: net.ParseIP("192.168.50.99")}); err != nil {
		t.Fatal(err)
	}
	ipt := utiliptables.New(utiliptables.ProtocolIPv4)
	apply := func(peers ...Peer) {
		t.Helper()
		routes, unroutable := PeerRoutes("a", "10.244.0.0/24", peers, connected)
		if len(unroutable) > 0 {
			t.Fatalf("unroutable: %v", unroutable)
		}
		if err := SetPeerRoutes(routes); err != nil {
			t.Fatal(err)
		}
		if err := SetPeerNoMasquerade(ipt, "10.244.0.0/24", routes); err != nil {
			t.Fatal(err)
		}
	}
	state := func() (string, string) {
		t.Helper()
		rs, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rs {
			if r.Gw != nil && r.Dst != nil {
				got = append(got, r.Dst.String()+" via "+r.Gw.String())
			}
		}
		out, err := exec.Command("iptables", "-t", "nat", "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S: %v: %s", err, out)
		}
		return strings.Join(got, ","), string(out)
	}

	b := Peer{Name: "b", PodCIDRs: []string{"10.244.1.0/24"}, Address: "192.168.50.2"}
	c := Peer{Name: "c", PodCIDRs: []string{"10.244.2.0/24"}, Address: "192.168.50.3"}
	apply(b, c)
	apply(b, c) // again: nothing changes, nothing fails
	routes, rules := state()
	if routes != "10.99.0.0/24 via 192.168.50.99,10.244.1.0/24 via 192.168.50.2,10.244.2.0/24 via 192.168.50.3" {
		t.Errorf("routes after b and c: %s", routes)
	}
	for _, want := range []string{"-A POSTROUTING -m comment", "-j STEADYPLANE-POD-PEERS", "-A STEADYPLANE-POD-PEERS -s 10.244.0.0/24 -d 10.244.1.0/24 -j ACCEPT", "-A STEADYPLANE-POD-PEERS -s 10.244.0.0/24 -d 10.244.2.0/24 -j ACCEPT"} {
		if !strings.Contains(rules, want) {
			t.Errorf("nat rules lack %q:\n%s", want, rules)
		}
	}
	if n := strings.Count(rules, "-j STEADYPLANE-POD-PEERS"); n != 1 {
		t.Errorf("%d jumps to the chain, want 1:\n%s", n, rules)
	}

	apply(b) // c left
	routes, rules = state()
	if routes != "10.99.0.0/24 via 192.168.50.99,10.244.1.0/24 via 192.168.50.2" {
		t.Errorf("routes after c left: %s", routes)
	}
	if strings.Contains(rules, "10.244.2.0/24") || !strings.Contains(rules, "-d 10.244.1.0/24 -j ACCEPT") {
		t.Errorf("after c left, want b's rule alone:\n%s", rules)
	}
	if had, err := HasPeerRoutes(); err != nil || !had {
		t.Errorf("HasPeerRoutes = %v, %v; want b's route found (a restarted agent removes what it no longer needs)", had, err)
	}
}

// enterNetNS moves this test's thread into a new network namespace, with
// routes and iptables rules of its own, until the returned func is called.
// It needs root and iptables.
func enterNetNS(t *testing.T) (leave func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		testci.CannotRun(t, "network namespaces need root")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		testci.CannotRun(t, "iptables: %v", err)
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ns, err := netns.New() // and entered, on this thread only
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	return func() {
		_ = netns.Set(orig)
		ns.Close()
		orig.Close()
		runtime.UnlockOSThread() // after the thread's namespace is restored
	}
}
