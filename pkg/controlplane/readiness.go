package controlplane

import (
	"context"
	"crypto/x509"
	"net"
	"path/filepath"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
	"github.com/steadyplane/steadyplane/pkg/pki"
	"github.com/steadyplane/steadyplane/pkg/readinessgates"
	"github.com/steadyplane/steadyplane/pkg/readinessgates/webhook"
)

// prepareReadiness issues the controller's own client certificate
// (readinessgates.User, bound to exactly the RBAC it needs), the webhook's
// serving certificate from the cluster CA (which the API server is given as
// the caBundle), and its process. The webhook listens on 127.0.0.1 and is
// registered there: every server runs one, and each API server calls its
// own, so a pod's gates never wait on another host (nor on a Service,
// which would need kube-proxy on the API server's host). The gate's
// controller runs on one server at a time (a Lease, the node's name as
// identity).
func (cp *ControlPlane) prepareReadiness() error {
	if !cp.opts.ReadinessController {
		return nil
	}
	kubeconfig, err := cp.componentKubeconfig("readiness-controller", readinessgates.User)
	if err != nil {
		return err
	}
	// Its pod mounts its credentials alone: the webhook's serving
	// certificate is there, with a copy of the CA certificate it gives
	// the API servers as the webhook's caBundle (not the CA's key).
	creds := cp.dir.credentials("readiness-controller")
	caFile := filepath.Join(creds, pki.CAName+".crt")
	if err := atomicfile.WriteFile(caFile, cp.pki.CA.CertPEM, 0o644); err != nil {
		return err
	}
	kp, err := cp.issue(creds, cp.pki.CA, pki.CertSpec{
		Name: "readiness-webhook", CommonName: "steadyplane-readiness-webhook",
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
	})
	if err != nil {
		return err
	}
	if err := cp.migrateLegacyCredentials("readiness-webhook", kp); err != nil {
		return err
	}
	if err := cp.migrateLegacyCredentials("readiness-webhook", kp); err != nil {
		return err
	}
	addr := cp.addr.readinessWebhook()
	cp.Readiness = &Process{Name: "readiness-controller", Binary: cp.opts.Binary, LogPath: cp.dir.log("readiness-controller"), Args: []string{
		"readiness-controller", "--kubeconfig=" + kubeconfig, "--webhook-bind-address=" + addr, "--pod-cidr=" + cp.opts.ClusterCIDR,
		"--tls-cert-file=" + kp.CertPath, "--tls-private-key-file=" + kp.KeyPath, "--ca-file=" + caFile,
		"--leader-elect", "--identity=" + cp.opts.NodeName,
	}}
	if cp.Proxy != nil {
		// The load-balancer gate waits for the proxies' rules too.
		cp.Readiness.Args = append(cp.Readiness.Args, "--proxy-healthz-port="+strconv.Itoa(cp.opts.ProxyHealthzPort))
	}
	return nil
}

// readinessPodSpec is the readiness controller's static pod.
func (cp *ControlPlane) readinessPodSpec(binary string) staticpod.Spec {
	return staticpod.Spec{Name: readinessPod, Binary: binary, Args: cp.Readiness.Args,
		HostPaths: []staticpod.HostPath{cp.credentialsPath("readiness-controller")}}
}

// grantReadinessRBAC grants the controller its RBAC, with the admin
// credentials.
func (cp *ControlPlane) grantReadinessRBAC(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	if err := readinessgates.EnsureRBAC(ctx, client); err != nil {
		return err
	}
	if err := readinessgates.EnsureWebhookConfiguration(ctx, client, webhook.URL(cp.addr.readinessWebhook()), cp.pki.CA.CertPEM); err != nil {
		return err
	}
	if cp.staticPods {
		cp.progressf("starting readiness-gate webhook and controller (static pod %s)", readinessPod)
	}
	return nil
}

// StartReadinessController grants the controller its RBAC (with the admin
// credentials), starts it (as a static pod, or a child process) and waits
// until its webhook is registered.
func (cp *ControlPlane) StartReadinessController(ctx context.Context) error {
	if err := cp.grantReadinessRBAC(ctx); err != nil {
		return err
	}
	if err := cp.launcher.Start(ctx, readinessPod); err != nil {
		return err
	}
	return cp.waitReadinessControllerReady(ctx)
}

// waitReadinessControllerReady waits until this server's readiness-gate
// webhook answers on 127.0.0.1 (its serving certificate verified against
// the cluster CA) and the cluster's webhook configuration sends there:
// another server's registration alone does not make this one's ready.
func (cp *ControlPlane) waitReadinessControllerReady(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	addr := cp.addr.readinessWebhook()
	url := webhook.URL(addr)
	return cp.waitFor(ctx, readinessPod, readyPoll, func(ctx context.Context) (bool, string) {
		if err := webhook.Healthy(ctx, addr, cp.pki.CA.CertPEM); err != nil {
			return false, err.Error()
		}
		conf, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhook.ConfigurationName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, w := range conf.Webhooks {
			if u := w.ClientConfig.URL; u != nil && *u == url {
				return true, ""
			}
		}
		return false, "the webhook configuration does not send to " + url + " yet"
	})
}
