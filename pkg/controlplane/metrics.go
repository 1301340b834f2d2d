package controlplane

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"

	"github.com/steadyplane/steadyplane/pkg/addons/coredns"
	"github.com/steadyplane/steadyplane/pkg/addons/metricsapi"
	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// metricsComponent is the metrics API: a Deployment and an APIService.
const metricsComponent = metricsapi.Name

// metricsServing names metrics-server's serving certificate's files, in
// its credentials directory.
const metricsServing = "metrics-server-serving"

// prepareMetrics decides the metrics API (package addons/metricsapi) and
// issues metrics-server's serving certificate, signed by the cluster CA
// (the APIService's caBundle) and kept renewed while up runs. It needs
// what CoreDNS needs (a pod network, kube-proxy for its Service, the
// controllers, an address its pod reaches the API server at), and says
// so when it is missing.
func (cp *ControlPlane) prepareMetrics() error {
	if slices.Contains(cp.opts.Disable, metricsapi.Name) || cp.Node == nil {
		return nil
	}
	if why := coredns.Missing(coredns.Needs{PodNetwork: cp.nodeRuntime == "runc", Proxy: cp.Proxy != nil,
		Controllers: cp.ControllerManager != nil, Advertise: cp.addr.advertise}); why != "" {
		cp.progressf("WARNING: no metrics API (kubectl top, autoscaling): %s", why)
		return nil
	}
	if _, err := cp.issue(cp.dir.credentials(metricsapi.Name), cp.pki.CA, pki.CertSpec{
		Name: metricsServing, CommonName: metricsapi.Name, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: metricsapi.ServiceDNSNames(cp.opts.ClusterDomain)}); err != nil {
		return err
	}
	server, alts, _ := altsvcclient.OrderedServers([]string{net.JoinHostPort(cp.addr.advertise.String(), strconv.Itoa(cp.opts.APIServerPort))})
	cp.metrics = &metricsapi.Config{APIServer: server, Alternatives: alts, NodeCA: cp.pki.KubeletCA.CertPEM, ServingCA: cp.pki.CA.CertPEM}
	return nil
}

// applyMetrics writes the metrics API's objects, once its image is in the
// node's store, and its serving certificate's Secret when the Secret's is
// not one this server would keep (publishMetricsCert).
func (cp *ControlPlane) applyMetrics(ctx context.Context) error {
	image, servers, err := cp.addonTargets(ctx)
	if err != nil {
		return err
	}
	cp.metrics.Image = image
	if server, alts, ok := altsvcclient.OrderedServers(servers); ok {
		cp.metrics.APIServer, cp.metrics.Alternatives = server, alts
	}
	cp.progressf("starting the metrics API (metrics-server, %s)", cp.metrics)
	if _, err := cp.publishMetricsCert(ctx); err != nil {
		return err
	}
	objs, err := metricsapi.Objects(*cp.metrics)
	if err != nil {
		return err
	}
	return cp.applyAddon(ctx, "metrics API", objs)
}

// publishMetricsCert writes this server's metrics-server certificate into
// the Secret the pod mounts, unless the Secret's own is still good
// (metricsapi.KeepSecret): every server issues its own, and the first one
// written serves until it is due. It returns when the certificate the
// Secret then holds is due for renewal.
func (cp *ControlPlane) publishMetricsCert(ctx context.Context) (due time.Time, err error) {
	client, err := cp.adminClient()
	if err != nil {
		return time.Time{}, err
	}
	secret, err := client.CoreV1().Secrets(metricsapi.Namespace).Get(ctx, metricsapi.SecretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		secret = nil
	case err != nil:
		return time.Time{}, fmt.Errorf("metrics API: %w", err)
	}
	keep, why := metricsapi.KeepSecret(secret, cp.pki.CA.Cert, metricsapi.ServiceDNSNames(cp.opts.ClusterDomain), time.Now())
	if keep {
		return renewalTimeOf(secret.Data[corev1.TLSCertKey]), nil
	}
	kp, err := pki.ReadKeyPair(cp.metricsServingPaths())
	if err != nil {
		return time.Time{}, err
	}
	cp.progressf("metrics API: writing its serving certificate (Secret %s/%s: %s)", metricsapi.Namespace, metricsapi.SecretName, why)
	if err := cp.applyAddon(ctx, "metrics API", []any{metricsapi.ServingSecret(kp.CertPEM, kp.KeyPEM)}); err != nil {
		return time.Time{}, err
	}
	return renewalTimeOf(kp.CertPEM), nil
}

// renewalTimeOf is when the first certificate of certPEM is due for
// renewal; zero when there is none.
func renewalTimeOf(certPEM []byte) time.Time {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(certs) == 0 {
		return time.Time{}
	}
	return pki.RenewalTime(certs[0])
}

// metricsServingPaths are the certificate and key files of this server's
// metrics-server certificate.
func (cp *ControlPlane) metricsServingPaths() (certPath, keyPath string) {
	dir := cp.dir.credentials(metricsapi.Name)
	return filepath.Join(dir, metricsServing+".crt"), filepath.Join(dir, metricsServing+".key")
}

// waitMetricsStarted waits until metrics-server's Deployment has its pod
// of the current template. It does not wait for the APIService to be
// Available: metrics-server is ready after its second scrape, a
// resolution later, which up need not spend.
func (cp *ControlPlane) waitMetricsStarted(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	return cp.waitFor(ctx, nodeComponent, readyPoll, func(ctx context.Context) (bool, string) {
		return metricsapi.Started(ctx, client)
	})
}
