package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/pkg/controlplane"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// HAPort is the API server port on every host of an HACluster.
const HAPort = 6443

// HACluster is a highly available control plane on test hosts: on each host
// of a Network, one member of a three-member etcd cluster and one API server,
// all started from the steadyplane binary, with KEP-3037 on.
type HACluster struct {
	Net        *Network
	PKI        *pki.Cluster
	Dir        string
	Etcd       []*controlplane.Process
	APIServers []*controlplane.Process
	logf       func(string, ...any)
}

// StartHACluster makes n test hosts and starts etcd and an API server on
// each, waiting until every API server is ready and the kubernetes Endpoints
// list all of them. The caller must Close it, even after an error-free test.
func StartHACluster(ctx context.Context, dir string, n int, logf func(string, ...any)) (*HACluster, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	nw, err := NewNetwork(n)
	if err != nil {
		return nil, err
	}
	c := &HACluster{Net: nw, Dir: dir, logf: logf}
	var ips []net.IP
	var initial []string
	for i, h := range nw.Hosts {
		ips = append(ips, h.IP)
		initial = append(initial, fmt.Sprintf("node%d=https://%s", i, net.JoinHostPort(h.IP.String(), "2380")))
	}
	store := &pki.Store{Dir: filepath.Join(dir, "pki")}
	if c.PKI, err = store.EnsureCluster(pki.ClusterConfig{APIServerIPs: append(ips, net.ParseIP("10.96.0.1")), EtcdIPs: ips}); err != nil {
		c.Close()
		return nil, err
	}
	for i, h := range nw.Hosts {
		node := fmt.Sprintf("node%d", i)
		clientURL := "https://" + net.JoinHostPort(h.IP.String(), "2379")
		etcdArgs := append(controlplane.EtcdArgs(c.PKI, controlplane.EtcdMember{
			Name: node, DataDir: filepath.Join(dir, node, "etcd"),
			ClientURL: clientURL, PeerURL: "https://" + net.JoinHostPort(h.IP.String(), "2380"),
			InitialCluster: strings.Join(initial, ","),
		}), "--initial-cluster-token=steadyplane-ha-test", "--log-level=warn")
		name, args := nw.Command(i, node, bin, etcdArgs...)
		c.Etcd = append(c.Etcd, &controlplane.Process{Name: node + "-etcd", Binary: name, Args: args, LogPath: filepath.Join(dir, node, "etcd.log")})

		// Each API server uses its own host's member, as in kubeadm's stacked
		// topology: listing every member lets a server's etcd client pick a
		// vanished one, which was measured to stall failover up to 14s.
		apiArgs := controlplane.APIServerArgs(c.PKI, controlplane.APIServer{
			EtcdServers: []string{clientURL}, BindAddress: h.IP.String(), AdvertiseAddress: h.IP, Port: HAPort,
			ServiceCIDR: "10.96.0.0/16", CertDir: filepath.Join(dir, node, "apiserver-certs"),
			RetryAfterIfNotInitialized: true, RetryAfter: time.Second, AlternativeServices: true,
		})
		name, args = nw.Command(i, node, bin, apiArgs...)
		c.APIServers = append(c.APIServers, &controlplane.Process{Name: node + "-apiserver", Binary: name, Args: args, LogPath: filepath.Join(dir, node, "apiserver.log")})
	}
	for _, p := range append(append([]*controlplane.Process{}, c.Etcd...), c.APIServers...) {
		if err := p.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	for i := range c.APIServers {
		if err := c.WaitReady(ctx, i); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// URL is the address of host i's API server.
func (c *HACluster) URL(i int) string {
	return "https://" + net.JoinHostPort(c.Net.Hosts[i].IP.String(), strconv.Itoa(HAPort))
}

// Host is host i's API server as host:port.
func (c *HACluster) Host(i int) string {
	u, _ := url.Parse(c.URL(i))
	return u.Host
}

// AdminConfig returns an admin client configuration for host i's API server.
func (c *HACluster) AdminConfig(i int) *rest.Config {
	return &rest.Config{
		Host: c.URL(i),
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: c.PKI.CA.CertPath, CertFile: c.PKI.Admin.CertPath, KeyFile: c.PKI.Admin.KeyPath,
		},
	}
}

// WaitReady waits until host i's API server answers /readyz with 200.
func (c *HACluster) WaitReady(ctx context.Context, i int) error {
	return controlplane.WaitReadyz(ctx, c.AdminConfig(i), c.APIServers[i], 3*time.Minute, c.logf)
}

// KillAPIServer kills host i's API server with SIGKILL and waits for it to exit.
func (c *HACluster) KillAPIServer(i int) {
	p := c.APIServers[i]
	_ = p.Signal(syscall.SIGKILL)
	if ch := p.Exited(); ch != nil {
		<-ch
	}
}

// RestartAPIServer starts host i's API server again and waits until it is ready.
func (c *HACluster) RestartAPIServer(ctx context.Context, i int) error {
	if err := c.APIServers[i].Start(); err != nil {
		return err
	}
	return c.WaitReady(ctx, i)
}

// LogTails returns the end of every process's log, for a failing test.
func (c *HACluster) LogTails(n int) string {
	var b strings.Builder
	for _, p := range append(append([]*controlplane.Process{}, c.Etcd...), c.APIServers...) {
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", p.Name, p.LogPath, p.LogTail(n))
	}
	return b.String()
}

// Close stops every process and removes the test hosts.
func (c *HACluster) Close() {
	for _, p := range append(append([]*controlplane.Process{}, c.APIServers...), c.Etcd...) {
		p.Stop(10 * time.Second)
	}
	c.Net.Close()
}

// Index returns which host's API server serves at hostport, -1 for none.
func (c *HACluster) Index(hostport string) int {
	for i := range c.APIServers {
		if c.Host(i) == hostport {
			return i
		}
	}
	return -1
}
