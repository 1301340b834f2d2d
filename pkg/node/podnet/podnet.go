// Package podnet gives each pod its own network through CNI: the standard
// plugins (bridge with host-local addresses from the node's pod CIDR,
// portmap for the pods with hostPorts, loopback) called by libcni on the
// pod's network namespace, with a configuration the agent writes. What
// pods send off the node is masqueraded by one rule of the node's
// (masquerade.go), not by iptables chains the bridge plugin would make and
// remove for every pod.
package podnet

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

// PluginDirs are where Debian's containernetworking-plugins and the usual
// manual installs put the plugins.
var PluginDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// Plugins are the CNI plugins the pod network calls: portmap (hostPorts
// and masquerade) only with NAT.
func Plugins(nat bool) []string {
	plugins := []string{"bridge", "host-local", "loopback"}
	if nat {
		plugins = append(plugins, "portmap")
	}
	return plugins
}

// Config is what the pod network is made of.
type Config struct {
	// PodCIDR is the node's range of pod addresses.
	PodCIDR string
	// Bridge is the host bridge the pods' interfaces join.
	Bridge string
	// IPAMDir keeps host-local's address leases (the agent's, so that an
	// agent restart keeps them).
	IPAMDir string
	// NAT masquerades pods' traffic leaving the node and enables hostPorts;
	// both need iptables.
	NAT bool
}

// nodeMasquerade tells whether the node's own rule masquerades the pods'
// traffic (IPv4, with NAT) rather than the bridge plugin's rules per pod.
func (cfg Config) nodeMasquerade(cidr *net.IPNet) bool {
	return cfg.NAT && cidr.IP.To4() != nil
}

// NetworkName names steadyplane's CNI network.
const NetworkName = "steadyplane"

// Conflist returns the CNI configuration list of cfg for pods without
// hostPorts, or with them (portmap after the bridge; it needs NAT).
// Both are the one network NetworkName: a pod's attachment is detached with
// the list it was attached with (libcni's cache).
func Conflist(cfg Config, hostPorts bool) ([]byte, error) {
	_, cidr, err := net.ParseCIDR(cfg.PodCIDR)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", cfg.PodCIDR, err)
	}
	if ones, bits := cidr.Mask.Size(); bits-ones < 2 {
		return nil, fmt.Errorf("pod CIDR %s has no room for pods", cidr)
	}
	if cfg.Bridge == "" || len(cfg.Bridge) > 15 {
		return nil, fmt.Errorf("bridge name %q: 1 to 15 characters", cfg.Bridge)
	}
	defaultRoute := "0.0.0.0/0"
	if cidr.IP.To4() == nil {
		defaultRoute = "::/0"
	}
	plugins := []map[string]any{{
		"type": "bridge", "bridge": cfg.Bridge, "isGateway": true, "ipMasq": cfg.NAT && !cfg.nodeMasquerade(cidr), "hairpinMode": true,
		"ipam": map[string]any{
			"type": "host-local", "dataDir": cfg.IPAMDir,
			"ranges": [][]map[string]string{{{"subnet": cidr.String()}}},
			"routes": []map[string]string{{"dst": defaultRoute}},
		},
	}}
	if cfg.NAT && hostPorts {
		plugins = append(plugins, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "snat": true})
	}
	return json.MarshalIndent(map[string]any{"cniVersion": "1.0.0", "name": NetworkName, "plugins": plugins}, "", "  ")
}

// loopbackConf brings up the pod's lo.
const loopbackConf = `{"cniVersion": "1.0.0", "name": "steadyplane-loopback", "plugins": [{"type": "loopback"}]}`

// Route is one IPv4 route of the host.
type Route struct {
	Dev string
	Dst *net.IPNet
}

// CheckFree returns an error if cidr overlaps a route of the host other than
// one through bridge (the pod network's own, from an earlier run): pods must
// get addresses nothing on the machine already uses.
func CheckFree(cidr string, routes []Route, bridge string) error {
	_, pods, err := net.ParseCIDR(cidr)
	if err != nil {
		return fmt.Errorf("pod CIDR %q: %w", cidr, err)
	}
	for _, r := range routes {
		if r.Dev == bridge || r.Dst == nil {
			continue
		}
		if ones, _ := r.Dst.Mask.Size(); ones == 0 {
			continue // the default route covers everything by design
		}
		if r.Dst.Contains(pods.IP) || pods.Contains(r.Dst.IP) {
			return fmt.Errorf("pod CIDR %s overlaps the route to %s via %s; choose a range no route uses (--pod-cidr)", pods, r.Dst, r.Dev)
		}
	}
	return nil
}

// HostRoutes reads the host's IPv4 routes from /proc/net/route.
func HostRoutes() ([]Route, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseRoutes(bufio.NewScanner(f))
}

func parseRoutes(sc *bufio.Scanner) ([]Route, error) {
	var routes []Route
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue // header
		}
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		dst, err1 := hex.DecodeString(f[1])
		mask, err2 := hex.DecodeString(f[7])
		if err1 != nil || err2 != nil || len(dst) != 4 || len(mask) != 4 {
			return nil, fmt.Errorf("/proc/net/route: bad line %q", sc.Text())
		}
		// The kernel prints them in host (little-endian) order.
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, binary.LittleEndian.Uint32(dst))
		m := make(net.IPMask, 4)
		binary.BigEndian.PutUint32(m, binary.LittleEndian.Uint32(mask))
		routes = append(routes, Route{Dev: f[0], Dst: &net.IPNet{IP: ip, Mask: m}})
	}
	return routes, sc.Err()
}

// Network sets up and tears down pods' networks.
type Network struct {
	cfg Config
	cni *libcni.CNIConfig
	// list attaches pods without hostPorts, ports those with them.
	list, ports *libcni.NetworkConfigList
	loopback    *libcni.NetworkConfigList
}

// New checks cfg against the host's routes and the plugins, writes the
// configuration to confPath (for inspection; the one for pods with
// hostPorts beside it), makes the node's masquerade rule and returns the
// network.
func New(cfg Config, confPath, cacheDir string) (*Network, error) {
	routes, err := HostRoutes()
	if err != nil {
		return nil, err
	}
	if err := CheckFree(cfg.PodCIDR, routes, cfg.Bridge); err != nil {
		return nil, err
	}
	for _, p := range Plugins(cfg.NAT) {
		if _, err := invoke.FindInPath(p, PluginDirs); err != nil {
			return nil, fmt.Errorf("CNI plugin %s not found in %v (Debian package containernetworking-plugins)", p, PluginDirs)
		}
	}
	if err := os.MkdirAll(filepath.Dir(confPath), 0o700); err != nil {
		return nil, err
	}
	n := &Network{cfg: cfg, cni: libcni.NewCNIConfigWithCacheDir(PluginDirs, cacheDir, nil)}
	for _, l := range []struct {
		list      **libcni.NetworkConfigList
		hostPorts bool
		path      string
	}{{&n.list, false, confPath}, {&n.ports, true, strings.TrimSuffix(confPath, ".conflist") + "-hostports.conflist"}} {
		b, err := Conflist(cfg, l.hostPorts)
		if err != nil {
			return nil, err
		}
		if err := atomicfile.WriteFile(l.path, b, 0o600); err != nil {
			return nil, err
		}
		if *l.list, err = libcni.ConfListFromBytes(b); err != nil {
			return nil, err
		}
	}
	lo, err := libcni.ConfListFromBytes([]byte(loopbackConf))
	if err != nil {
		return nil, err
	}
	n.loopback = lo
	if _, cidr, _ := net.ParseCIDR(cfg.PodCIDR); cfg.nodeMasquerade(cidr) {
		if err := EnsureMasquerade(utiliptables.New(utiliptables.ProtocolIPv4), cfg.PodCIDR); err != nil {
			return nil, fmt.Errorf("masquerading pods' traffic leaving the node: %w", err)
		}
	}
	return n, nil
}

// IPTablesAvailable tells whether NAT and hostPorts can be offered.
func IPTablesAvailable() bool {
	_, err := exec.LookPath("iptables")
	return err == nil
}

func (n *Network) runtimeConf(pod *corev1.Pod, id, netns, ifName string) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netns, IfName: ifName, Args: [][2]string{
		{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", pod.Namespace}, {"K8S_POD_NAME", pod.Name}, {"K8S_POD_INFRA_CONTAINER_ID", id}, {"K8S_POD_UID", string(pod.UID)},
	}}
	if ifName == "eth0" {
		var maps []map[string]any
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				if p.HostPort > 0 {
					proto := strings.ToLower(string(p.Protocol))
					if proto == "" {
						proto = "tcp"
					}
					maps = append(maps, map[string]any{"hostPort": p.HostPort, "containerPort": p.ContainerPort, "protocol": proto, "hostIP": p.HostIP})
				}
			}
		}
		if len(maps) > 0 {
			rt.CapabilityArgs = map[string]any{"portMappings": maps}
		}
	}
	return rt
}

// attachment is the configuration list and runtime configuration of the
// pod's attachment rt: those it was attached with when libcni's cache has
// them (the pod's own, from any earlier agent's configuration), otherwise
// the list for the pod's hostPorts.
func (n *Network) attachment(rt *libcni.RuntimeConf) (*libcni.NetworkConfigList, *libcni.RuntimeConf) {
	if b, cachedRT, err := n.cni.GetNetworkListCachedConfig(n.list, rt); err == nil && b != nil {
		if list, err := libcni.ConfListFromBytes(b); err == nil {
			return list, cachedRT
		}
	}
	if rt.CapabilityArgs != nil {
		return n.ports, rt
	}
	return n.list, rt
}

// PodCIDR is the range pods get their addresses from.
func (n *Network) PodCIDR() string { return n.cfg.PodCIDR }

// Bridge is the host bridge the pods' interfaces join.
func (n *Network) Bridge() string { return n.cfg.Bridge }

// NAT tells whether pods' traffic leaving the node is masqueraded.
func (n *Network) NAT() bool { return n.cfg.NAT }

// Setup attaches the pod's network namespace to the pod network and
// returns its addresses. A namespace already attached (a restarted agent)
// keeps its addresses: the cached result is returned.
func (n *Network) Setup(ctx context.Context, pod *corev1.Pod, id, netns string) ([]net.IP, error) {
	if hostPortsWithoutNAT(pod, n.cfg.NAT) {
		return nil, errors.New("hostPort needs iptables (the portmap plugin), which this node lacks")
	}
	rt := n.runtimeConf(pod, id, netns, "eth0")
	if cached, err := n.cni.GetNetworkListCachedResult(n.list, rt); err == nil && cached != nil {
		list, attached := n.attachment(rt)
		err := n.cni.CheckNetworkList(ctx, list, attached)
		if err == nil {
			return resultIPs(cached)
		}
		// What is left of the attachment goes first (an ADD beside it
		// fails on the existing interface); the pod gets a new address,
		// worth a line.
		klog.InfoS("The pod's network failed its CNI check; attaching it again", "pod", klog.KObj(pod), "err", err)
		if err := n.cni.DelNetworkList(ctx, list, attached); err != nil {
			return nil, fmt.Errorf("CNI %s: detaching a pod network that failed its check: %w", NetworkName, err)
		}
	}
	if _, err := n.cni.AddNetworkList(ctx, n.loopback, n.runtimeConf(pod, id, netns, "lo")); err != nil {
		return nil, fmt.Errorf("CNI loopback: %w", err)
	}
	list, _ := n.attachment(rt)
	res, err := n.cni.AddNetworkList(ctx, list, rt)
	if err != nil {
		_ = n.cni.DelNetworkList(ctx, list, rt)
		return nil, fmt.Errorf("CNI %s: %w", NetworkName, err)
	}
	return resultIPs(res)
}

// Teardown detaches the pod, with the configuration it was attached with,
// and releases its addresses.
func (n *Network) Teardown(ctx context.Context, pod *corev1.Pod, id, netns string) error {
	list, attached := n.attachment(n.runtimeConf(pod, id, netns, "eth0"))
	err := n.cni.DelNetworkList(ctx, list, attached)
	_ = n.cni.DelNetworkList(ctx, n.loopback, n.runtimeConf(pod, id, netns, "lo"))
	return err
}

func hostPortsWithoutNAT(pod *corev1.Pod, nat bool) bool {
	if nat {
		return false
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				return true
			}
		}
	}
	return false
}

func resultIPs(res types.Result) ([]net.IP, error) {
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, err
	}
	var ips []net.IP
	for _, ip := range cur.IPs {
		ips = append(ips, ip.Address.IP)
	}
	if len(ips) == 0 {
		return nil, errors.New("CNI gave the pod no address")
	}
	return ips, nil
}
