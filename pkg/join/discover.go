package join

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
)

// discoveryTimeout bounds each request of a join.
const discoveryTimeout = 15 * time.Second

// ErrTokenRefused says the API server did not accept the token.
var ErrTokenRefused = errors.New("the server refused the join token: it is unknown, was deleted or has expired (steadyplane token create, on a server, makes another; a node the cluster has already joins again only after steadyplane remove-node)")

// ClusterInfo is what a joining host learns before it authenticates.
type ClusterInfo struct {
	// CA is the cluster CA (PEM), checked against the token's pin.
	CA []byte
	// Servers are the API servers (host:port) the cluster published.
	Servers []string
}

// Discover reads the cluster CA and its API servers from the server at
// serverURL (kube-public/cluster-info) and accepts them only when the CA's
// public key is the one t pins and it signed the certificate the server
// presented on that same connection. The request carries no credential;
// only the pinned CA is returned.
func Discover(ctx context.Context, serverURL string, t Token) (*ClusterInfo, error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--server=%q: want an https URL such as https://10.0.0.1:6443", serverURL)
	}
	var presented []*x509.Certificate
	client := &http.Client{
		Timeout: discoveryTimeout,
		Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// The CA is not known yet: the chain is checked below against
			// the CA the token pins, before the answer is used.
			InsecureSkipVerify: true, //nolint:gosec
			VerifyConnection: func(cs tls.ConnectionState) error {
				presented = cs.PeerCertificates
				return nil
			},
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.Scheme+"://"+u.Host+"/api/v1/namespaces/"+metav1.NamespacePublic+"/configmaps/"+bootstrapapi.ConfigMapClusterInfo, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reaching %s: %w", u.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's CA from %s: %w", u.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the cluster's CA from %s: %s (is it a steadyplane server that made the token?)", u.Host, resp.Status)
	}
	info, err := parseClusterInfo(body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u.Host, err)
	}
	cas, err := certutil.ParseCertsPEM(info.CA)
	if err != nil {
		return nil, fmt.Errorf("%s: cluster-info's CA: %w", u.Host, err)
	}
	// Only the pinned CA is trusted from here on: cluster-info may carry
	// more certificates, which a man in the middle could have added.
	pinned, err := t.Pinned(cas)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u.Host, err)
	}
	if err := verifyPresented(presented, pinned, u.Hostname()); err != nil {
		return nil, fmt.Errorf("%s: %w", u.Host, err)
	}
	info.CA = nil
	for _, c := range pinned {
		info.CA = append(info.CA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	if len(info.Servers) == 0 {
		info.Servers = []string{u.Host}
	}
	return info, nil
}

// parseClusterInfo reads the CA and the servers of the kubeconfig in a
// cluster-info ConfigMap.
func parseClusterInfo(body []byte) (*ClusterInfo, error) {
	var cm corev1.ConfigMap
	if err := json.Unmarshal(body, &cm); err != nil {
		return nil, fmt.Errorf("cluster-info: %w", err)
	}
	cfg, err := clientcmd.Load([]byte(cm.Data[bootstrapapi.KubeConfigKey]))
	if err != nil {
		return nil, fmt.Errorf("cluster-info's kubeconfig: %w", err)
	}
	for _, c := range cfg.Clusters {
		if len(c.CertificateAuthorityData) > 0 {
			servers, err := altsvcclient.KubeconfigHosts(c)
			if err != nil {
				return nil, fmt.Errorf("cluster-info's kubeconfig: %w", err)
			}
			return &ClusterInfo{CA: c.CertificateAuthorityData, Servers: servers}, nil
		}
	}
	return nil, errors.New("cluster-info's kubeconfig has no CA")
}

// verifyPresented checks that the server's certificate chains to cas and
// names host.
func verifyPresented(presented []*x509.Certificate, cas []*x509.Certificate, host string) error {
	if len(presented) == 0 {
		return errors.New("the server presented no certificate")
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, c := range cas {
		roots.AddCert(c)
	}
	for _, c := range presented[1:] {
		inter.AddCert(c)
	}
	if _, err := presented[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host}); err != nil {
		return fmt.Errorf("the server's certificate is not from the pinned CA, or not for %s: %w", host, err)
	}
	return nil
}

// FetchBundle reads and opens the bundle sealed for t, authenticating with
// t's bootstrap token over TLS verified against caPEM.
func FetchBundle(ctx context.Context, serverURL string, caPEM []byte, t Token) (*Bundle, error) {
	client, err := kubernetes.NewForConfig(&rest.Config{Host: serverURL, BearerToken: t.Bootstrap(), Timeout: discoveryTimeout,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}, UserAgent: "steadyplane-join"})
	if err != nil {
		return nil, err
	}
	s, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, BundleSecretName(t.ID), metav1.GetOptions{})
	switch {
	case apierrors.IsUnauthorized(err):
		return nil, ErrTokenRefused
	case apierrors.IsForbidden(err), apierrors.IsNotFound(err):
		return nil, fmt.Errorf("the token is valid, but the server keeps no join data for it (a token made for something else?): %w", err)
	case err != nil:
		return nil, fmt.Errorf("reading the join data: %w", err)
	}
	return Open(s.Data[BundleKey], t)
}
