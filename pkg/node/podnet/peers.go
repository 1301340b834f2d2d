package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	netutils "k8s.io/utils/net"
)

// Peer is what the routes to another node's pods are made from: its name,
// its pod ranges and its address.
type Peer struct {
	Name     string
	PodCIDRs []string
	// Address is the node's InternalIP ("" for none yet).
	Address string
}

// PeerRoute is a route to another node's pods: its pod range through its
// address, which must be on a network this host is attached to (the next
// hop of a route is a neighbour).
type PeerRoute struct {
	Node string
	Dst  *net.IPNet
	Via  net.IP
}

func (r PeerRoute) String() string { return fmt.Sprintf("%s via %s (%s)", r.Dst, r.Via, r.Node) }

// PeerRoutes returns the routes through which this node's pods reach the
// pods of the other nodes (their pod ranges through their addresses, as
// flannel's host-gw does), sorted by destination, and for each node it
// cannot route to, why. A node without a pod range or an address yet is
// neither: it is routed once it has them. self is this node's name, own
// its pod range, connected the networks of this host's interfaces.
func PeerRoutes(self, own string, peers []Peer, connected []*net.IPNet) ([]PeerRoute, map[string]string) {
	_, ownNet, _ := netutils.ParseCIDRSloppy(own)
	var routes []PeerRoute
	unroutable := map[string]string{}
	// By name: of two nodes claiming one range (a stale Node left behind),
	// the same one gets it at every sync.
	peers = slices.SortedFunc(slices.Values(peers), func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	routedBy := map[string]string{}
	for _, p := range peers {
		if p.Name == self || len(p.PodCIDRs) == 0 || p.Address == "" {
			continue
		}
		via := netutils.ParseIPSloppy(p.Address)
		if via == nil {
			unroutable[p.Name] = fmt.Sprintf("its address %q is not an IP address", p.Address)
			continue
		}
		if !slices.ContainsFunc(connected, func(n *net.IPNet) bool { return n.Contains(via) }) {
			unroutable[p.Name] = fmt.Sprintf("its address %s is on no network this host is attached to (pods reach other nodes' pods only on a shared network)", via)
			continue
		}
		for _, c := range p.PodCIDRs {
			_, dst, err := netutils.ParseCIDRSloppy(c)
			switch {
			case err != nil:
				unroutable[p.Name] = fmt.Sprintf("its pod range %q: %v", c, err)
			case netutils.IsIPv4(via) != netutils.IsIPv4(dst.IP):
				continue // a range of the other family goes through an address of that family
			case ownNet != nil && (ownNet.Contains(dst.IP) || dst.Contains(ownNet.IP)):
				unroutable[p.Name] = fmt.Sprintf("its pod range %s overlaps this node's (%s)", dst, ownNet)
			case slices.ContainsFunc(connected, func(n *net.IPNet) bool { return n.Contains(dst.IP) || dst.Contains(n.IP) }):
				unroutable[p.Name] = fmt.Sprintf("its pod range %s overlaps a network this host is attached to", dst)
			case routedBy[dst.String()] != "":
				unroutable[p.Name] = fmt.Sprintf("its pod range %s is node %s's too", dst, routedBy[dst.String()])
			default:
				routedBy[dst.String()] = p.Name
				routes = append(routes, PeerRoute{Node: p.Name, Dst: dst, Via: via})
			}
		}
	}
	slices.SortFunc(routes, func(a, b PeerRoute) int { return strings.Compare(a.Dst.String(), b.Dst.String()) })
	return routes, unroutable
}

// RouteProtocol marks the routes SetPeerRoutes makes (the kernel keeps a
// route's protocol; values above 4 are free for routing daemons), so that
// it removes its own stale routes and nothing else.
const RouteProtocol netlink.RouteProtocol = 0x53

// ConnectedNetworks are the networks of this host's interfaces but bridge
// (the pods' own).
func ConnectedNetworks(bridge string) ([]*net.IPNet, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	var nets []*net.IPNet
	for _, l := range links {
		if l.Attrs().Name == bridge || l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if a.IPNet != nil && !a.IP.IsLinkLocalUnicast() {
				_, n, _ := net.ParseCIDR(a.IPNet.String())
				nets = append(nets, n)
			}
		}
	}
	return nets, nil
}

// HasPeerRoutes tells whether the host has routes SetPeerRoutes made (an
// earlier agent's).
func HasPeerRoutes() (bool, error) {
	have, err := madeRoutes()
	return len(have) > 0, err
}

// madeRoutes are the host's routes of RouteProtocol.
func madeRoutes() ([]netlink.Route, error) {
	return netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
}

// SetPeerRoutes makes the host's routes to other nodes' pods exactly
// routes: each is added or replaced, and a route of RouteProtocol to a
// range not in routes (a node that left) is removed.
func SetPeerRoutes(routes []PeerRoute) error {
	var errs []error
	want := map[string]bool{}
	for _, r := range routes {
		want[r.Dst.String()] = true
		if err := netlink.RouteReplace(&netlink.Route{Dst: r.Dst, Gw: r.Via, Protocol: RouteProtocol}); err != nil {
			errs = append(errs, fmt.Errorf("route %s: %w", r, err))
		}
	}
	have, err := madeRoutes()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, r := range have {
		if r.Dst != nil && !want[r.Dst.String()] {
			if err := netlink.RouteDel(&r); err != nil {
				errs = append(errs, fmt.Errorf("removing the route to %s: %w", r.Dst, err))
			}
		}
	}
	return errors.Join(errs...)
}

// PeerChain is the nat chain that keeps the source address of pod traffic
// to other nodes' pods: the bridge plugin masquerades whatever leaves the
// node's own pod range, and a pod must see the address of the pod that
// calls it.
const PeerChain utiliptables.Chain = "STEADYPLANE-POD-PEERS"

// PeerRules is the iptables-restore input that makes PeerChain accept
// (leave unmasqueraded) the traffic of own to each route's range.
func PeerRules(own string, routes []PeerRoute) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*nat\n:%s - [0:0]\n", PeerChain)
	for _, r := range routes {
		if r.Dst.IP.To4() != nil { // the rules are iptables', IPv4
			fmt.Fprintf(&b, "-A %s -s %s -d %s -j ACCEPT\n", PeerChain, own, r.Dst)
		}
	}
	b.WriteString("COMMIT\n")
	return b.Bytes()
}

// SetPeerNoMasquerade makes PeerChain hold exactly PeerRules(own, routes),
// in one iptables-restore, and jumps to it first from nat POSTROUTING.
func SetPeerNoMasquerade(ipt utiliptables.Interface, own string, routes []PeerRoute) error {
	if _, err := ipt.EnsureChain(utiliptables.TableNAT, PeerChain); err != nil {
		return fmt.Errorf("nat chain %s: %w", PeerChain, err)
	}
	if _, err := ipt.EnsureRule(utiliptables.Prepend, utiliptables.TableNAT, utiliptables.ChainPostrouting,
		"-m", "comment", "--comment", "steadyplane: pods keep their address to other nodes' pods", "-j", string(PeerChain)); err != nil {
		return fmt.Errorf("jump to %s: %w", PeerChain, err)
	}
	if err := ipt.RestoreAll(PeerRules(own, routes), utiliptables.NoFlushTables, utiliptables.NoRestoreCounters); err != nil {
		return fmt.Errorf("nat chain %s: %w", PeerChain, err)
	}
	return nil
}
