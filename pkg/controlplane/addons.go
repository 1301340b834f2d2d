package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/steadyplane/steadyplane/pkg/addons/addonctl"
	"github.com/steadyplane/steadyplane/pkg/addons/coredns"
	"github.com/steadyplane/steadyplane/pkg/addons/localpath"
	"github.com/steadyplane/steadyplane/pkg/addons/metricsapi"
	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// addonsPod is the add-on controllers' static pod.
const addonsPod = "steadyplane-addon-controllers"

// Disableable lists what up's --disable takes: the add-on controllers, the
// cluster's DNS and the metrics API (as k3s's --disable coredns,
// metrics-server).
func Disableable() []string {
	return append([]string{coredns.Name, metricsapi.Name}, addonctl.Known...)
}

// validateDisable says which of --disable's names up does not know.
func validateDisable(names []string) error {
	known := Disableable()
	for _, n := range names {
		if !slices.Contains(known, n) {
			return fmt.Errorf("--disable: %q is not one of %s", n, strings.Join(known, ", "))
		}
	}
	return nil
}

// addonControllers are the add-on controllers this run has: those that
// --disable does not name.
func (o *Options) addonControllers() []string {
	var out []string
	for _, c := range addonctl.Known {
		if !slices.Contains(o.Disable, c) {
			out = append(out, c)
		}
	}
	return out
}

// prepareAddons issues the add-on controllers' client certificate
// (addonctl.User, bound to exactly the RBAC they need) and decides their
// process. Every server runs one; one at a time acts (a Lease, the node's
// name as identity). Without kube-proxy nothing would carry a load
// balancer's traffic, so then it is left out.
func (cp *ControlPlane) prepareAddons() error {
	controllers := cp.opts.addonControllers()
	if len(controllers) == 0 || !cp.opts.Controllers || cp.Proxy == nil {
		return nil
	}
	kubeconfig, err := cp.componentKubeconfig("addon-controllers", addonctl.User)
	if err != nil {
		return err
	}
	// Its pod mounts its credentials alone: the nodes' serving CA (a
	// certificate, not its key) is copied there.
	nodeCA := filepath.Join(cp.dir.credentials("addon-controllers"), "node-api-ca.crt")
	if err := atomicfile.WriteFile(nodeCA, cp.pki.KubeletCA.CertPEM, 0o644); err != nil {
		return err
	}
	args := []string{"addon-controllers", "--kubeconfig=" + kubeconfig, "--controllers=" + strings.Join(controllers, ","), "--node-api-ca-file=" + nodeCA,
		"--leader-elect", "--identity=" + cp.opts.NodeName,
		// What listens on a node's address: the node API's port is read
		// from each Node; the others are up's.
		"--reserved-port=kube-proxy-healthz=" + strconv.Itoa(cp.opts.ProxyHealthzPort) + "/TCP",
		"--reserved-server-port=apiserver=" + strconv.Itoa(cp.opts.APIServerPort) + "/TCP",
		"--reserved-server-port=etcd-client=" + strconv.Itoa(cp.opts.EtcdClientPort) + "/TCP",
		"--reserved-server-port=etcd-peer=" + strconv.Itoa(cp.opts.EtcdPeerPort) + "/TCP",
	}
	cp.Addons = &Process{Name: "addon-controllers", Binary: cp.opts.Binary, LogPath: cp.dir.log("addon-controllers"), Args: args}
	return nil
}

// addonsPodSpec is the add-on controllers' static pod.
func (cp *ControlPlane) addonsPodSpec(binary string) staticpod.Spec {
	return staticpod.Spec{Name: addonsPod, Binary: binary, Args: cp.Addons.Args,
		HostPaths: []staticpod.HostPath{cp.credentialsPath("addon-controllers")}}
}

// grantAddonsRBAC grants the controllers their RBAC, and makes the
// local-path StorageClasses when they run, with the admin credentials.
func (cp *ControlPlane) grantAddonsRBAC(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	if err := addonctl.EnsureRBAC(ctx, client); err != nil {
		return err
	}
	if slices.Contains(cp.opts.addonControllers(), addonctl.LocalStorage) {
		return localpath.EnsureStorageClasses(ctx, client)
	}
	return nil
}

// waitAddonsReady waits until one server's add-on controllers lead.
func (cp *ControlPlane) waitAddonsReady(ctx context.Context) error {
	return cp.waitLeader(ctx, addonctl.LeaseName)
}
