package coredns

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
)

// Needs is what a server's cluster DNS depends on, as "up" runs it.
type Needs struct {
	// PodNetwork: a node agent on this server runs pods on their own
	// network (runc), where CoreDNS's pod runs.
	PodNetwork bool
	// Proxy: kube-proxy routes the kube-dns Service's address.
	Proxy bool
	// Controllers: the controller manager makes the Deployment's pods.
	Controllers bool
	// Advertise is the address the API server publishes, where CoreDNS's
	// pod reaches it.
	Advertise net.IP
}

// Missing says why a server with n can have no cluster DNS, or "" when it
// can.
func Missing(n Needs) string {
	switch {
	case !n.PodNetwork:
		return "it runs as a pod on the pod network, which needs the runc runtime"
	case !n.Proxy:
		return "its Service needs kube-proxy"
	case !n.Controllers:
		return "its Deployment needs the controllers"
	case n.Advertise == nil || n.Advertise.IsLoopback() || n.Advertise.IsUnspecified():
		return fmt.Sprintf("the API server publishes no address pods reach (%s); give --advertise-address", n.Advertise)
	}
	return ""
}

// Server is what a server's cluster DNS is made of besides the image,
// which is added once the node agent's image store is in use.
type Server struct {
	// ServiceCIDR is the service range: the kube-dns Service takes its
	// tenth address.
	ServiceCIDR string
	// Domain is the cluster's domain.
	Domain string
	// ResolvConf is the resolver file given (--resolv-conf); "" chooses
	// one (NodeResolvConf).
	ResolvConf string
	// Advertise and APIServerPort are where CoreDNS reaches this API
	// server (failing over between every server listed, one until more
	// join), not through the kubernetes Service (kube-proxy's rules).
	Advertise     net.IP
	APIServerPort int
}

// Plan is a server's cluster DNS, decided before anything starts.
type Plan struct {
	// Config is the DNS without its Image.
	Config Config
	// ResolvConf is the node's resolver file, which pods with dnsPolicy
	// Default (CoreDNS among them) get.
	ResolvConf string
}

// NodeArgs are the node agent's flags for its pods to resolve with the
// cluster's DNS.
func (p Plan) NodeArgs() []string {
	return []string{"--cluster-dns=" + p.Config.ServiceIP, "--resolv-conf=" + p.ResolvConf}
}

// PlanServer decides a server's DNS: the Service's address, the node's
// resolver file (read here: whether it names a server pods can reach
// decides Forward) and where CoreDNS reaches the API server. note says
// what will not resolve, "" when all does.
func PlanServer(s Server) (plan Plan, note string, err error) {
	ip, err := ServiceIP(s.ServiceCIDR)
	if err != nil {
		return Plan{}, "", err
	}
	etc, _ := os.ReadFile("/etc/resolv.conf")
	_, err = os.Stat(SystemdResolvConf)
	resolv := NodeResolvConf(s.ResolvConf, etc, err == nil)
	upstream, err := os.ReadFile(resolv)
	if err != nil && s.ResolvConf != "" {
		return Plan{}, "", fmt.Errorf("--resolv-conf=%s: %w", resolv, err)
	}
	forward := HasNameserver(upstream)
	if !forward {
		note = fmt.Sprintf("%s names no nameserver pods can reach; names outside %s will not resolve", resolv, s.Domain)
	}
	server := net.JoinHostPort(s.Advertise.String(), strconv.Itoa(s.APIServerPort))
	return Plan{ResolvConf: resolv, Config: Config{Domain: s.Domain, ServiceIP: ip.String(), Forward: forward,
		APIServer: "https://" + server, Alternatives: []string{server}}}, note, nil
}

// WithServers is c reaching the API servers that serve now (host:port):
// with more than one, all of them in one order, so that servers of one
// release that see the same list write the same Deployment.
func WithServers(c Config, servers []string) Config {
	if len(servers) > 1 {
		c.APIServer, c.Alternatives, _ = altsvcclient.OrderedServers(servers)
	}
	return c
}
