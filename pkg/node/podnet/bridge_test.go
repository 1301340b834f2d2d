package podnet

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/steadyplane/steadyplane/internal/testci"
)

func TestGateway(t *testing.T) {
	tests := []struct{ cidr, want, errHas string }{
		{cidr: "10.244.0.0/24", want: "10.244.0.1"},
		{cidr: "10.244.3.0/24", want: "10.244.3.1"},
		{cidr: "10.244.0.7/24", want: "10.244.0.1"}, // a host address names its network
		{cidr: "10.244.0.0/31", errHas: "no room"},
		{cidr: "10.244.0.0", errHas: "pod CIDR"},
	}
	for _, tc := range tests {
		got, err := Gateway(tc.cidr)
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("Gateway(%s) = %v, %v; want an error containing %q", tc.cidr, got, err, tc.errHas)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("Gateway(%s) = %v, %v; want %s", tc.cidr, got, err, tc.want)
		}
	}
}

// TestBridgeBeforePods makes the bridge as "up" does before any pod, twice
// (a second up), and then runs a pod on it: the bridge plugin takes the
// bridge as it finds it, and the gateway keeps its address.
func TestBridgeBeforePods(t *testing.T) {
	if os.Geteuid() != 0 {
		testci.CannotRun(t, "making a bridge needs root")
	}
	const bridge, cidr = "sptest8", "10.251.8.0/24"
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	for i := 0; i < 2; i++ {
		gw, err := EnsureBridge(bridge, cidr)
		if err != nil {
			t.Fatal(err)
		}
		if gw.String() != "10.251.8.1" {
			t.Fatalf("gateway %s, want 10.251.8.1", gw)
		}
	}
	link, err := netlink.LinkByName(bridge)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != "10.251.8.1/24" {
		t.Fatalf("bridge addresses %v, %v; want exactly 10.251.8.1/24", addrs, err)
	}
	n, r, dir := testNetwork(t, cidr, bridge)
	sb, err := r.CreateSandbox("a", filepath.Join(dir, "a"), "a", false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.RemoveSandbox(sb)
	ips, err := n.Setup(context.Background(), testPod("a"), "a", sb.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Teardown(context.Background(), testPod("a"), "a", sb.NetNS)
	if ips[0].String() == "10.251.8.1" || !mustCIDR(cidr).Contains(ips[0]) {
		t.Errorf("pod address %v: want one of %s other than the gateway", ips, cidr)
	}
	if addrs, _ := netlink.AddrList(link, netlink.FAMILY_V4); len(addrs) != 1 || addrs[0].IPNet.String() != "10.251.8.1/24" {
		t.Errorf("after a pod, bridge addresses %v; want exactly 10.251.8.1/24", addrs)
	}

	// A port with a lower MAC than any joins (another pod, say): the bridge
	// keeps its MAC, so the pod's network still passes the plugin's check
	// and a restarted agent keeps the pod's address.
	low, _ := net.ParseMAC("02:00:00:00:00:01")
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "sptest8a", HardwareAddr: low, MasterIndex: link.Attrs().Index}, PeerName: "sptest8b"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	defer netlink.LinkDel(veth)
	if err := netlink.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
	again, err := n.Setup(context.Background(), testPod("a"), "a", sb.NetNS)
	if err != nil || len(again) != 1 || !again[0].Equal(ips[0]) {
		t.Errorf("the pod's network after a port with a low MAC joined: %v, %v; want %v kept", again, err, ips)
	}
	if br, err := netlink.LinkByName(bridge); err != nil || br.Attrs().HardwareAddr.String() == low.String() {
		t.Errorf("bridge MAC %v, %v: it follows its ports", br.Attrs().HardwareAddr, err)
	}
	// The bridge's MAC changed all the same (by hand): the check fails, and
	// the pod is attached again in one call.
	other, _ := net.ParseMAC("02:00:00:00:00:02")
	if err := netlink.LinkSetHardwareAddr(link, other); err != nil {
		t.Fatal(err)
	}
	if again, err := n.Setup(context.Background(), testPod("a"), "a", sb.NetNS); err != nil || len(again) != 1 || !mustCIDR(cidr).Contains(again[0]) {
		t.Errorf("the pod's network after its check failed: %v, %v; want it attached again", again, err)
	}

	// A link of that name that is not a bridge is refused, not taken.
	if _, err := EnsureBridge("lo", "10.251.9.0/24"); err == nil || !strings.Contains(err.Error(), "not a bridge") {
		t.Errorf("EnsureBridge on lo: %v; want a refusal", err)
	}
}
