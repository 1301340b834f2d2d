package controlplane

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	netutils "k8s.io/utils/net"

	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/node/podnet"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

func (cp *ControlPlane) preparePKI() error {
	cp.advertise = netutils.ParseIPSloppy(cp.opts.AdvertiseAddress)
	if cp.advertise == nil && OwnsNodeAddress(cp.opts, os.Geteuid() == 0) {
		// A server on loopback only has no address pods could reach it
		// at, and Endpoints refuse loopback: it also listens on the pod
		// bridge's address, which up makes, on no interface that leads off the
		// machine.
		gw, err := podnet.EnsureBridge(cp.opts.CNIBridge, cp.opts.PodCIDR)
		if err != nil {
			return fmt.Errorf("the node's address on the pod bridge: %w", err)
		}
		cp.advertise, cp.bridgeAddress = gw, gw
		cp.progressf("cluster address %s on bridge %s (the kubernetes Service's endpoint and the Node's InternalIP)", gw, cp.opts.CNIBridge)
	}
	if cp.advertise == nil {
		cp.advertise = netutils.ParseIPSloppy(cp.opts.BindAddress)
	}
	_, serviceNet, _ := netutils.ParseCIDRSloppy(cp.opts.ServiceCIDR)
	serviceIP, err := netutils.GetIndexedIP(serviceNet, 1)
	if err != nil {
		return fmt.Errorf("--service-cidr=%s: %w", cp.opts.ServiceCIDR, err)
	}
	store := cp.store()
	cp.pki, err = store.EnsureCluster(pki.ClusterConfig{
		APIServerIPs: []net.IP{netutils.ParseIPSloppy(cp.opts.BindAddress), cp.advertise, serviceIP},
		EtcdIPs:      []net.IP{cp.hostAddress()},
	})
	if err != nil {
		return err
	}
	cp.kubeconfig = filepath.Join(cp.dataDir, "admin.kubeconfig")
	return clientconfig.WriteKubeconfig(cp.kubeconfig, cp.APIServerURL(), "admin", cp.pki.CA, cp.pki.Admin, cp.alternatives())
}

// OwnsNodeAddress says whether "up" gives the cluster an address of its own
// on the pod bridge: when the API server listens only on loopback and no
// address was named, and a node agent with a pod network runs (as root,
// not --runtime=process). A named --bind-address, --advertise-address or
// --node-ip is used as given.
func OwnsNodeAddress(o Options, root bool) bool {
	bind := netutils.ParseIPSloppy(o.BindAddress)
	return root && o.Node && o.NodeRuntime != "process" && o.AdvertiseAddress == "" && o.NodeIP == "" && bind != nil && bind.IsLoopback()
}
