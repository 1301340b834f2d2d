package controlplane

import (
	"fmt"
	"net"
	"os"

	netutils "k8s.io/utils/net"

	"github.com/steadyplane/steadyplane/pkg/node/podnet"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// preparePKI decides the server's addresses (making the pod bridge's
// address when up owns the node's address), then creates or reuses the
// cluster's PKI for them and writes the admin kubeconfig.
func (cp *ControlPlane) preparePKI() error {
	o := cp.opts
	cp.addr = addresses{bind: o.BindAddress, advertise: netutils.ParseIPSloppy(o.AdvertiseAddress), nodeIP: o.NodeIP,
		apiserverPort: o.APIServerPort, etcdClientPort: o.EtcdClientPort, etcdPeerPort: o.EtcdPeerPort, webhookPort: o.ReadinessWebhookPort}
	if cp.addr.advertise == nil && OwnsNodeAddress(o, os.Geteuid() == 0) {
		// A server on loopback only has no address pods could reach it
		// at, and Endpoints refuse loopback: it also listens on the pod
		// bridge's address, which up makes, on no interface that leads off the
		// machine.
		gw, err := podnet.EnsureBridge(o.CNIBridge, o.PodCIDR)
		if err != nil {
			return fmt.Errorf("the node's address on the pod bridge: %w", err)
		}
		cp.addr.advertise, cp.addr.bridge = gw, gw
		cp.progressf("cluster address %s on bridge %s (the kubernetes Service's endpoint and the Node's InternalIP)", gw, o.CNIBridge)
	}
	if cp.addr.advertise == nil {
		cp.addr.advertise = netutils.ParseIPSloppy(o.BindAddress)
	}
	_, serviceNet, _ := netutils.ParseCIDRSloppy(o.ServiceCIDR)
	serviceIP, err := netutils.GetIndexedIP(serviceNet, 1)
	if err != nil {
		return fmt.Errorf("--service-cidr=%s: %w", o.ServiceCIDR, err)
	}
	cp.pkiConfig = pki.ClusterConfig{
		APIServerIPs: []net.IP{netutils.ParseIPSloppy(o.BindAddress), cp.addr.advertise, serviceIP},
		EtcdIPs:      []net.IP{cp.addr.host()},
	}
	cp.pki, err = cp.store().EnsureCluster(cp.pkiConfig)
	if err != nil {
		return err
	}
	return cp.writeAdminKubeconfig()
}

// credentialsPath is a component's credentials directory as its static
// pod mounts it.
func (cp *ControlPlane) credentialsPath(name string) staticpod.HostPath {
	return staticpod.HostPath{Path: cp.dir.credentials(name), ReadOnly: true}
}

// pkiPath is the PKI directory as the static pods that read it mount it.
func (cp *ControlPlane) pkiPath() staticpod.HostPath {
	return staticpod.HostPath{Path: cp.dir.pkiDir(), ReadOnly: true}
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
