package controlplane

import (
	"context"
	"crypto/x509"
	"net"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	netutils "k8s.io/utils/net"

	"github.com/steadyplane/steadyplane/pkg/pki"
	"github.com/steadyplane/steadyplane/pkg/readinessgates"
)

// prepareReadiness issues the controller's own client certificate
// (readinessgates.User, bound to exactly the RBAC it needs), the webhook's
// serving certificate from the cluster CA (which the API server is given as
// the caBundle), and its process.
func (cp *ControlPlane) prepareReadiness() error {
	kubeconfig, err := cp.componentKubeconfig("readiness-controller", readinessgates.User)
	if err != nil {
		return err
	}
	kp, err := cp.store().EnsureCert(cp.pki.CA, pki.CertSpec{
		Name: "readiness-webhook", CommonName: "steadyplane-readiness-webhook",
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPs: []net.IP{netutils.ParseIPSloppy(cp.opts.BindAddress)},
	})
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(cp.opts.BindAddress, strconv.Itoa(cp.opts.ReadinessWebhookPort))
	cp.Readiness = &Process{Name: "readiness-controller", Binary: cp.opts.Binary, LogPath: filepath.Join(cp.dataDir, "logs", "readiness-controller.log"), Args: []string{
		"readiness-controller", "--kubeconfig=" + kubeconfig, "--webhook-bind-address=" + addr, "--pod-cidr=" + cp.opts.ClusterCIDR,
		"--tls-cert-file=" + kp.CertPath, "--tls-private-key-file=" + kp.KeyPath, "--ca-file=" + cp.pki.CA.CertPath,
	}}
	if cp.Proxy != nil {
		// The load-balancer gate waits for the proxies' rules too.
		cp.Readiness.Args = append(cp.Readiness.Args, "--proxy-healthz-port="+strconv.Itoa(cp.opts.ProxyHealthzPort))
	}
	return nil
}

// StartReadinessController grants the controller its RBAC (with the admin
// credentials), starts it (as a static pod, or a child process) and waits
// until its webhook is registered.
func (cp *ControlPlane) StartReadinessController(ctx context.Context) error {
	if err := cp.beforeStart(ctx, readinessPod); err != nil {
		return err
	}
	if err := cp.launcher.Start(ctx, readinessPod); err != nil {
		return err
	}
	return cp.WaitReadinessControllerReady(ctx)
}

// WaitReadinessControllerReady waits until the readiness-gate webhook is registered.
func (cp *ControlPlane) WaitReadinessControllerReady(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	return poll(ctx, cp.launcher.Runner(readinessPod), cp.opts.ReadyTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, string) {
		_, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "steadyplane-readiness-gates", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}
