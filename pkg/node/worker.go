package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/addons/coredns"
	"github.com/steadyplane/steadyplane/pkg/addons/kubeproxy"
	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// workerDNSTimeout bounds a worker's look-up of the cluster's DNS.
const workerDNSTimeout = 30 * time.Second

// setUpWorker gives a worker node (node --server) what a server's up gives
// its node: kube-proxy as a static pod of its own agent, and the cluster's
// DNS for its ClusterFirst pods with the image CoreDNS runs from (its pods
// may be scheduled here).
func (c *Config) setUpWorker(ctx context.Context, cfg *rest.Config, proxyKubeconfig string) error {
	o := &c.Agent
	manifests := filepath.Join(o.RootDir, "manifests")
	if os.Geteuid() != 0 || !o.Runtime.Isolated() {
		c.printf("WARNING: no kube-proxy and no cluster DNS on this node: they need the runc runtime, as root; Services' cluster IPs do not route here")
		_, _, err := kubeproxy.WriteWorker(kubeproxy.Worker{ManifestDir: manifests}, exec.LookPath)
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Static pods and the DNS image use a copy that outlives this
	// binary's path.
	bin, err := binary.Install(self, filepath.Join(o.RootDir, "bin"))
	if err != nil {
		return err
	}
	if c.Proxy && o.PodManifestPath != "" {
		manifests = o.PodManifestPath
	}
	mode, warning, err := kubeproxy.WriteWorker(kubeproxy.Worker{Enabled: c.Proxy, ManifestDir: manifests, Binary: bin, Mode: c.ProxyMode,
		Kubeconfig: proxyKubeconfig, NodeName: o.NodeName, NodeIP: o.NodeIP}, exec.LookPath)
	if err != nil {
		return err
	}
	if c.Proxy {
		// The agent watches the directory kube-proxy's manifest is in.
		o.PodManifestPath = manifests
		if warning != "" {
			c.printf("WARNING: %s", warning)
		}
		c.printf("kube-proxy (%s mode) runs as a static pod: %s", mode, filepath.Join(manifests, kubeproxy.ManifestFile))
	}
	if len(o.ClusterDNS) == 0 && !c.findClusterDNS(ctx, cfg) {
		return nil
	}
	// CoreDNS's pods may be scheduled here: the image of this binary goes
	// into the store.
	ref, err := o.Images.AddBinary(bin, images.UnpackOptions{})
	if err != nil {
		return fmt.Errorf("the DNS image: %w", err)
	}
	c.printf("cluster DNS: %s, domain %s (image %s)", o.ClusterDNS[0], o.ClusterDomain, ref)
	return nil
}

// findClusterDNS sets the cluster DNS's address and domain from the
// kube-dns Service, and says whether the node has cluster DNS. A failure
// to read it is a warning: the node runs its pods all the same, and they
// lack the cluster's names until a restart finds them.
func (c *Config) findClusterDNS(ctx context.Context, cfg *rest.Config) bool {
	o := &c.Agent
	if !c.Proxy {
		// Its address is a cluster IP, which nothing would route here.
		c.printf("no cluster DNS without kube-proxy (--proxy=false); give --cluster-dns for another proxy; ClusterFirst pods resolve with %s", o.ResolverConfig)
		return false
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		c.printf("WARNING: no cluster DNS: %v", err)
		return false
	}
	fctx, cancel := context.WithTimeout(ctx, workerDNSTimeout)
	ip, domain, found, err := coredns.Find(fctx, client)
	cancel()
	switch {
	case err != nil:
		klog.ErrorS(err, "Reading the cluster's DNS; ClusterFirst pods fall back to Default (MissingClusterDNS)")
		c.printf("WARNING: no cluster DNS: %v; ClusterFirst pods resolve with %s until the node agent starts again (or give --cluster-dns)", err, o.ResolverConfig)
		return false
	case !found:
		c.printf("no cluster DNS: the cluster has no %s/%s Service; ClusterFirst pods resolve with %s", coredns.Namespace, coredns.ServiceName, o.ResolverConfig)
		return false
	}
	o.ClusterDNS = []net.IP{net.ParseIP(ip)}
	if o.ClusterDomain == "" {
		o.ClusterDomain = domain
	}
	return true
}
