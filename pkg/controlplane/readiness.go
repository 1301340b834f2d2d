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
)

// prepareReadiness issues the webhook's serving certificate from the cluster
// CA (which the API server is given as the caBundle) and its process.
func (cp *ControlPlane) prepareReadiness() error {
	store := cp.store()
	kp, err := store.EnsureCert(cp.pki.CA, pki.CertSpec{
		Name: "readiness-webhook", CommonName: "steadyplane-readiness-webhook",
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPs: []net.IP{netutils.ParseIPSloppy(cp.opts.BindAddress)},
	})
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(cp.opts.BindAddress, strconv.Itoa(cp.opts.ReadinessWebhookPort))
	cp.Readiness = &Process{Name: "readiness-controller", Binary: cp.opts.Binary, LogPath: filepath.Join(cp.dataDir, "logs", "readiness-controller.log"), Args: []string{
		"readiness-controller", "--kubeconfig=" + cp.kubeconfig, "--webhook-bind-address=" + addr,
		"--tls-cert-file=" + kp.CertPath, "--tls-private-key-file=" + kp.KeyPath, "--ca-file=" + cp.pki.CA.CertPath,
	}}
	return nil
}

// WaitReadinessControllerReady waits until the readiness-gate webhook is registered.
func (cp *ControlPlane) WaitReadinessControllerReady(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	return poll(ctx, cp.Readiness, cp.opts.ReadyTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, string) {
		_, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "steadyplane-readiness-gates", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}
