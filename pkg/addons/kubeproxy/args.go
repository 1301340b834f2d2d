package kubeproxy

import (
	"net"
	"strconv"
)

// Config is what differs between the kube-proxies of a cluster.
type Config struct {
	// Kubeconfig has the kube-proxy's credentials: system:kube-proxy on a
	// server, the node's own on a worker.
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

// Args returns the arguments of "steadyplane proxy" (upstream's
// kube-proxy). The conntrack settings are left as the machine has them
// (0 means "do not change"): a laptop's kernel tables are not the
// cluster's to retune.
func Args(c Config) []string {
	local := "--cluster-cidr=" + c.ClusterCIDR
	if c.ClusterCIDR == "" {
		local = "--detect-local-mode=NodeCIDR"
	}
	return []string{
		"proxy",
		"--kubeconfig=" + c.Kubeconfig,
		"--hostname-override=" + c.NodeName,
		"--proxy-mode=" + c.Mode,
		local,
		// Node ports on the node's address only, in either mode
		// (iptables mode would open them on every address, loopback
		// and the LAN's included).
		"--nodeport-addresses=primary",
		"--healthz-bind-address=" + net.JoinHostPort(c.NodeIP, strconv.Itoa(c.HealthzPort)),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(c.MetricsPort),
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
	}
}
