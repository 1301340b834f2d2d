package controlplane

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/steadyplane/steadyplane/pkg/addons/kubeproxy"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// prepareProxy issues kube-proxy's client certificate and kubeconfig and
// chooses its mode (package kubeproxy), when the node runs pods on a pod
// network.
func (cp *ControlPlane) prepareProxy() error {
	if !cp.opts.Proxy || cp.Node == nil {
		return nil
	}
	if os.Geteuid() != 0 || cp.nodeRuntime != "runc" {
		cp.progressf("WARNING: no kube-proxy: Services route only for pods on a pod network (the runc runtime, as root); their cluster IPs do not route on this node")
		return nil
	}
	mode, warning, err := kubeproxy.Preflight(string(cp.dir), cp.opts.ProxyMode, "--proxy=false (and --dns=false)", exec.LookPath)
	if err != nil {
		return err
	}
	if warning != "" {
		cp.progressf("WARNING: %s", warning)
	}
	// Upstream kube-proxy builds its client from the kubeconfig alone:
	// the auth provider in it fails over between the API servers listed.
	kubeconfig, err := cp.writeComponentKubeconfig(clientconfig.WriteProviderKubeconfig, kubeproxy.Name, kubeproxy.User)
	if err != nil {
		return err
	}
	cp.Proxy = &Process{Name: kubeproxy.Name, Binary: cp.opts.Binary, LogPath: cp.dir.log(kubeproxy.Name),
		Args: kubeproxy.Args(kubeproxy.Config{Kubeconfig: kubeconfig, NodeName: cp.opts.NodeName, Mode: mode, ClusterCIDR: cp.opts.ClusterCIDR,
			NodeIP: cp.addr.node(), HealthzPort: cp.opts.ProxyHealthzPort, MetricsPort: cp.opts.ProxyMetricsPort})}
	cp.proxyMode = mode
	return nil
}

// proxyPod is kube-proxy's static pod on this server.
func (cp *ControlPlane) proxyPod(binary string) staticpod.Spec {
	return kubeproxy.Pod(binary, cp.Proxy.Args, cp.dir.kubeconfig(kubeproxy.Name))
}

// waitProxyReady waits until kube-proxy has programmed the node's rules
// from the API (its /healthz answers 200).
func (cp *ControlPlane) waitProxyReady(ctx context.Context) error {
	url := kubeproxy.HealthzURL(cp.addr.node(), cp.opts.ProxyHealthzPort)
	client := &http.Client{Timeout: 2 * time.Second}
	return cp.waitFor(ctx, proxyComponent, readyPoll, func(ctx context.Context) (bool, string) {
		return kubeproxy.Healthy(ctx, client, url)
	})
}
