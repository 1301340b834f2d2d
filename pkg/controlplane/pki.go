package controlplane

import (
	"fmt"
	"net"
	"path/filepath"

	netutils "k8s.io/utils/net"

	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

func (cp *ControlPlane) preparePKI() error {
	cp.advertise = netutils.ParseIPSloppy(cp.opts.AdvertiseAddress)
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
	})
	if err != nil {
		return err
	}
	cp.kubeconfig = filepath.Join(cp.dataDir, "admin.kubeconfig")
	return clientconfig.WriteKubeconfig(cp.kubeconfig, cp.APIServerURL(), "admin", cp.pki.CA, cp.pki.Admin, cp.alternatives())
}
