package controlplane

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// Proxy modes of kube-proxy that "up" chooses between.
const (
	ProxyModeAuto     = "auto"
	ProxyModeNFTables = "nftables"
	ProxyModeIPTables = "iptables"
)

// proxyComponent is kube-proxy's static pod.
const proxyComponent = "kube-proxy"

// ProxyUser is kube-proxy's identity: upstream's bootstrap policy binds it
// to the system:node-proxier ClusterRole (watch Services, Endpoints,
// EndpointSlices, ServiceCIDRs and Nodes; write Events), and nothing more.
const ProxyUser = "system:kube-proxy"

// kube-proxy's ports by default, as upstream's: /healthz on the node's
// address, metrics on 127.0.0.1.
const (
	DefaultProxyHealthzPort = 10256
	DefaultProxyMetricsPort = 10249
)

// nftablesMinKernel is the oldest kernel kube-proxy's nftables mode
// accepts (upstream checks for 5.13).
var nftablesMinKernel = [2]int{5, 13}

// ChooseProxyMode decides kube-proxy's mode from the request (auto,
// nftables or iptables), the kernel release (uname -r) and which of the nft
// and iptables programs the machine has. auto prefers nftables, which also
// drops traffic to cluster IPs no Service owns; iptables mode does not, so a
// warning says so.
func ChooseProxyMode(requested, kernel string, haveNFT, haveIPTables bool) (mode, warning string, err error) {
	nftOK := haveNFT && kernelAtLeast(kernel, nftablesMinKernel)
	switch requested {
	case ProxyModeNFTables:
		if !haveNFT {
			return "", "", fmt.Errorf("--proxy-mode=nftables needs the nft program (Debian package nftables)")
		}
		if !nftOK {
			return "", "", fmt.Errorf("--proxy-mode=nftables needs Linux %d.%d or later; this kernel is %s (use --proxy-mode=iptables)", nftablesMinKernel[0], nftablesMinKernel[1], kernel)
		}
		return ProxyModeNFTables, "", nil
	case ProxyModeIPTables:
		if !haveIPTables {
			return "", "", fmt.Errorf("--proxy-mode=iptables needs the iptables programs (Debian package iptables)")
		}
		return ProxyModeIPTables, iptablesWarning, nil
	case ProxyModeAuto, "":
		if nftOK {
			return ProxyModeNFTables, "", nil
		}
		if haveIPTables {
			return ProxyModeIPTables, iptablesWarning, nil
		}
		return "", "", fmt.Errorf("kube-proxy needs nft (Linux %d.%d or later) or iptables; this machine has neither (install nftables or iptables, or pass --proxy=false)", nftablesMinKernel[0], nftablesMinKernel[1])
	}
	return "", "", fmt.Errorf("--proxy-mode=%q: auto, nftables or iptables", requested)
}

const iptablesWarning = "kube-proxy runs in iptables mode: traffic to a cluster IP that no Service owns is not dropped on this node"

// kernelAtLeast says whether a release such as "6.1.0-18-amd64" is at least
// min (major, minor); an unreadable release is not.
func kernelAtLeast(release string, min [2]int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	digits := func(s string) string { return s[:len(s)-len(strings.TrimLeft(s, "0123456789"))] }
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(digits(parts[1]))
	if err1 != nil || err2 != nil {
		return false
	}
	return major > min[0] || major == min[0] && minor >= min[1]
}

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Proxy is what differs between the kube-proxies of a cluster.
type Proxy struct {
	// Kubeconfig has the system:kube-proxy credentials.
	Kubeconfig string
	// NodeName is the node it programs (its Node gives the node IP).
	NodeName string
	// Mode is nftables or iptables.
	Mode string
	// ClusterCIDR is the pods' range: traffic from outside it to a
	// Service is masqueraded. Empty takes the node's own pod range
	// (spec.podCIDR) as what is local: a worker does not know the
	// cluster's.
	ClusterCIDR string
	// NodeIP is the Node's InternalIP: /healthz listens there (not on
	// every address, as upstream's default), where the readiness
	// controller's data-path check and load balancers read it.
	NodeIP string
	// HealthzPort (on NodeIP) and MetricsPort (on 127.0.0.1) are
	// upstream's 10256 and 10249 by default.
	HealthzPort, MetricsPort int
}

// ProxyArgs returns the arguments of "steadyplane proxy" (upstream's
// kube-proxy). The conntrack settings are left as the machine has them
// (0 means "do not change"): a laptop's kernel tables are not the
// cluster's to retune.
func ProxyArgs(p Proxy) []string {
	local := "--cluster-cidr=" + p.ClusterCIDR
	if p.ClusterCIDR == "" {
		local = "--detect-local-mode=NodeCIDR"
	}
	return []string{
		"proxy",
		"--kubeconfig=" + p.Kubeconfig,
		"--hostname-override=" + p.NodeName,
		"--proxy-mode=" + p.Mode,
		local,
		// Node ports on the node's address only, in either mode
		// (iptables mode would open them on every address, loopback
		// and the LAN's included).
		"--nodeport-addresses=primary",
		"--healthz-bind-address=" + net.JoinHostPort(p.NodeIP, strconv.Itoa(p.HealthzPort)),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(p.MetricsPort),
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
	}
}

// prepareProxy issues kube-proxy's client certificate and kubeconfig and
// chooses its mode.
func (cp *ControlPlane) prepareProxy(lookPath func(string) (string, error)) error {
	if os.Geteuid() != 0 || cp.nodeRuntime != "runc" {
		cp.progressf("WARNING: no kube-proxy: Services route only for pods on a pod network (the runc runtime, as root); their cluster IPs do not route on this node")
		return nil
	}
	if pids := otherProxies(cp.dataDir); len(pids) > 0 {
		return fmt.Errorf("another kube-proxy runs in this network namespace (pid %v): two would overwrite each other's rules in the machine's packet filter; stop it, or pass --proxy=false (and --dns=false)", pids)
	}
	mode, warning, err := chooseProxyModeHere(cp.opts.ProxyMode, lookPath)
	if err != nil {
		return err
	}
	if warning != "" {
		cp.progressf("WARNING: %s", warning)
	}
	// Upstream kube-proxy builds its client from the kubeconfig alone:
	// the auth provider in it fails over between the API servers listed.
	kubeconfig, err := cp.writeComponentKubeconfig(clientconfig.WriteProviderKubeconfig, proxyComponent, ProxyUser)
	if err != nil {
		return err
	}
	cp.Proxy = &Process{Name: proxyComponent, Binary: cp.opts.Binary, LogPath: filepath.Join(cp.dataDir, "logs", "kube-proxy.log"),
		Args: ProxyArgs(Proxy{Kubeconfig: kubeconfig, NodeName: cp.opts.NodeName, Mode: mode, ClusterCIDR: cp.opts.ClusterCIDR,
			NodeIP: cp.nodeIP(), HealthzPort: cp.opts.ProxyHealthzPort, MetricsPort: cp.opts.ProxyMetricsPort})}
	cp.proxyMode = mode
	return nil
}

// chooseProxyModeHere is ChooseProxyMode for this machine's kernel and programs.
func chooseProxyModeHere(requested string, lookPath func(string) (string, error)) (mode, warning string, err error) {
	_, nftErr := lookPath("nft")
	_, iptErr := lookPath("iptables-restore")
	return ChooseProxyMode(requested, kernelRelease(), nftErr == nil, iptErr == nil)
}

// proxyPod is kube-proxy's static pod: privileged (it programs the
// node's packet filter), its kubeconfig read-only, and the host's
// xtables lock, which iptables mode takes as every iptables user on the
// machine does.
func proxyPod(binary string, args []string, kubeconfig string) Component {
	return Component{Name: proxyComponent, Binary: binary, Args: args, Privileged: true,
		HostPaths: []HostPath{{Path: kubeconfig, ReadOnly: true}, {Path: "/run/xtables.lock", File: true}}}
}

// WorkerProxy writes kube-proxy's static pod for a worker node (steadyplane
// node --server) into manifestDir: it runs binary with the node's own
// credentials in kubeconfig (the API servers bind system:node-proxier to
// the group of nodes), and takes the node's pod range as local. mode is
// auto, nftables or iptables; the mode chosen and a warning about it
// come back. A kube-proxy of another program in this network namespace is
// refused: the two would overwrite each other's rules.
func WorkerProxy(manifestDir, binary, mode, kubeconfig, nodeName, nodeIP string) (chosen, warning string, err error) {
	if pids := otherProxies(filepath.Dir(kubeconfig)); len(pids) > 0 {
		return "", "", fmt.Errorf("another kube-proxy runs in this network namespace (pid %v): two would overwrite each other's rules in the machine's packet filter; stop it, or pass --proxy=false", pids)
	}
	chosen, warning, err = chooseProxyModeHere(mode, exec.LookPath)
	if err != nil {
		return "", "", err
	}
	args := ProxyArgs(Proxy{Kubeconfig: kubeconfig, NodeName: nodeName, Mode: chosen, NodeIP: nodeIP,
		HealthzPort: DefaultProxyHealthzPort, MetricsPort: DefaultProxyMetricsPort})
	return chosen, warning, WriteManifest(manifestDir, proxyPod(binary, args, kubeconfig).Pod())
}

// WaitProxyReady waits until kube-proxy's /healthz answers 200, which it
// does once it has programmed the node's rules from the API.
func (cp *ControlPlane) WaitProxyReady(ctx context.Context) error {
	url := "http://" + net.JoinHostPort(cp.nodeIP(), strconv.Itoa(cp.opts.ProxyHealthzPort)) + "/healthz"
	client := &http.Client{Timeout: 2 * time.Second}
	return poll(ctx, cp.launcher.Runner(proxyComponent), cp.opts.ReadyTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err.Error()
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, "healthz " + resp.Status
		}
		return true, ""
	})
}

// otherProxies are the kube-proxies in this network namespace that are not this data
// directory's: upstream's binary, or another steadyplane's "proxy".
func otherProxies(dataDir string) []int {
	pids := procfs.Find(func(argv []string) bool {
		if len(argv) == 0 || strings.Contains(strings.Join(argv, "\x00"), dataDir+"/") {
			return false
		}
		base := filepath.Base(argv[0])
		return base == "kube-proxy" || len(argv) > 1 && argv[1] == "proxy" && strings.HasPrefix(base, "steadyplane")
	})
	// One in another network namespace (another host on this machine)
	// has a packet filter of its own.
	return slices.DeleteFunc(pids, func(pid int) bool { return !procfs.SameNetNS(pid) })
}
