package metricsapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationhelper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/steadyplane/steadyplane/pkg/addons/apply"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// KeepSecret says whether the serving certificate in secret (nil when
// there is none) may go on serving: it parses and its key matches, ca signed it,
// it holds every name of names, and it is not yet due for renewal
// (pki.RenewalTime). why says what is wrong when it may not.
func KeepSecret(secret *corev1.Secret, ca *x509.Certificate, names []string, now time.Time) (keep bool, why string) {
	if secret == nil {
		return false, "none yet"
	}
	certs, err := certutil.ParseCertsPEM(secret.Data[corev1.TLSCertKey])
	if err != nil || len(certs) == 0 {
		return false, "its certificate does not parse"
	}
	if len(secret.Data[corev1.TLSPrivateKeyKey]) == 0 {
		return false, "it has no key"
	}
	if _, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]); err != nil {
		return false, "its key does not match its certificate"
	}
	cert := certs[0]
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return false, "the cluster CA does not verify it: " + err.Error()
	}
	for _, n := range names {
		if !slices.Contains(cert.DNSNames, n) {
			return false, "it lacks the name " + n
		}
	}
	if at := pki.RenewalTime(cert); !now.Before(at) {
		return false, fmt.Sprintf("it was due for renewal at %s", at.UTC().Format(time.RFC3339))
	}
	return true, ""
}

// Started says whether metrics-server's Deployment has made its pods of
// the current template; the reason says what is missing.
func Started(ctx context.Context, client kubernetes.Interface) (bool, string) {
	return apply.Rollout(ctx, client, Namespace, Name, false)
}

// Available says whether the API servers serve metrics.k8s.io: the
// APIService's Available condition, whose message says why not.
func Available(ctx context.Context, client aggregator.Interface) (bool, string) {
	s, err := client.ApiregistrationV1().APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	c := apiregistrationhelper.GetAPIServiceConditionByType(s, apiregistrationv1.Available)
	if c == nil {
		return false, "APIService " + APIServiceName + " has no Available condition yet"
	}
	if c.Status != apiregistrationv1.ConditionTrue {
		return false, fmt.Sprintf("APIService %s: %s: %s", APIServiceName, c.Reason, c.Message)
	}
	return true, ""
}
