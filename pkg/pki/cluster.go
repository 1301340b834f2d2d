package pki

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

// KubernetesServiceDNSNames are the names by which pods, and steadyplane's
// alternative-services clients, reach the API server; its serving certificate
// carries them all.
var KubernetesServiceDNSNames = []string{
	"kubernetes",
	"kubernetes.default",
	"kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local",
}

// File base names inside the PKI directory.
const (
	CAName     = "ca"
	EtcdCAName = "etcd-ca"
	// KubeletCAName signs only the node agents' serving certificates
	// (the API server trusts it for them alone): a node asks for its own
	// by CSR, for names it chooses, which no client may take for the API
	// server's.
	KubeletCAName = "kubelet-ca"
	// FrontProxyCAName signs only the certificate the API server's
	// aggregation layer proves itself with to extension API servers
	// (metrics-server): they trust its X-Remote-User headers by it alone.
	FrontProxyCAName = "front-proxy-ca"
	// FrontProxyClientName is that certificate, FrontProxyClientCN its
	// name (--requestheader-allowed-names).
	FrontProxyClientName    = "front-proxy-client"
	FrontProxyClientCN      = "front-proxy-client"
	APIServerName           = "apiserver"
	APIServerEtcdClientName = "apiserver-etcd-client"
	// APIServerKubeletClientName is how the API server proves itself to
	// node agents (logs, exec, port-forward).
	APIServerKubeletClientName = "apiserver-kubelet-client"
	EtcdServerName             = "etcd-server"
	AdminName                  = "admin"
	ServiceAccountKeyName      = "sa"
)

// MastersGroup is the group whose members the RBAC authorizer lets do anything.
const MastersGroup = "system:masters"

// ClusterConfig says which names the serving certificates must carry.
type ClusterConfig struct {
	// APIServerIPs are the addresses clients dial: bind and advertise
	// addresses, the first service IP. 127.0.0.1 is always added.
	APIServerIPs []net.IP
	// APIServerDNSNames are extra names; KubernetesServiceDNSNames and
	// localhost are always added.
	APIServerDNSNames []string
	// EtcdIPs are the addresses etcd serves clients and peers on; 127.0.0.1 is
	// always added.
	EtcdIPs []net.IP
	// EtcdDNSNames are extra names for etcd; localhost is always added.
	EtcdDNSNames []string
}

// Cluster is the full set of files a single-node control plane needs.
type Cluster struct {
	CA, EtcdCA *Authority
	// KubeletCA signs the node agents' serving certificates.
	KubeletCA *Authority
	// APIServer serves HTTPS; APIServerEtcdClient is how it proves itself to etcd.
	APIServer, APIServerEtcdClient *KeyPair
	// APIServerKubeletClient is how it proves itself to node agents; its
	// user is bound to system:kubelet-api-admin only.
	APIServerKubeletClient *KeyPair
	// EtcdServer serves etcd's client and peer traffic.
	EtcdServer *KeyPair
	// Admin is a client certificate in system:masters.
	Admin *KeyPair
	// FrontProxyCA signs FrontProxyClient, the aggregation layer's client
	// certificate.
	FrontProxyCA     *Authority
	FrontProxyClient *KeyPair
	// ServiceAccountKey signs service-account tokens; ServiceAccountPub verifies them.
	ServiceAccountKey, ServiceAccountPub string
}

var loopbackIP = net.IPv4(127, 0, 0, 1)

// EnsureCluster creates, or reuses, every certificate and key of a control plane.
func (s *Store) EnsureCluster(cfg ClusterConfig) (*Cluster, error) {
	var c Cluster
	var err error
	if c.CA, err = s.EnsureCA(CAName, "steadyplane-ca"); err != nil {
		return nil, err
	}
	if c.EtcdCA, err = s.EnsureCA(EtcdCAName, "steadyplane-etcd-ca"); err != nil {
		return nil, err
	}
	if c.KubeletCA, err = s.EnsureCA(KubeletCAName, "steadyplane-kubelet-serving-ca"); err != nil {
		return nil, err
	}
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if c.APIServer, err = s.EnsureCert(c.CA, CertSpec{
		Name:       APIServerName,
		CommonName: "kube-apiserver",
		Usages:     server,
		DNSNames:   uniqueStrings(append(append([]string{"localhost"}, KubernetesServiceDNSNames...), cfg.APIServerDNSNames...)),
		IPs:        uniqueIPs(append([]net.IP{loopbackIP}, cfg.APIServerIPs...)),
	}); err != nil {
		return nil, err
	}
	if c.APIServerEtcdClient, err = s.EnsureCert(c.EtcdCA, CertSpec{
		Name: APIServerEtcdClientName, CommonName: "kube-apiserver-etcd-client", Usages: client,
	}); err != nil {
		return nil, err
	}
	if c.APIServerKubeletClient, err = s.EnsureCert(c.CA, CertSpec{
		Name: APIServerKubeletClientName, CommonName: "kube-apiserver-kubelet-client", Usages: client,
	}); err != nil {
		return nil, err
	}
	if c.EtcdServer, err = s.EnsureCert(c.EtcdCA, CertSpec{
		Name:       EtcdServerName,
		CommonName: "etcd-server",
		Usages:     both, // etcd members also dial each other with it
		DNSNames:   uniqueStrings(append([]string{"localhost"}, cfg.EtcdDNSNames...)),
		IPs:        uniqueIPs(append([]net.IP{loopbackIP}, cfg.EtcdIPs...)),
	}); err != nil {
		return nil, err
	}
	if c.Admin, err = s.EnsureCert(c.CA, CertSpec{
		Name: AdminName, CommonName: "steadyplane-admin", Organization: []string{MastersGroup}, Usages: client,
	}); err != nil {
		return nil, err
	}
	if c.FrontProxyCA, err = s.EnsureCA(FrontProxyCAName, "steadyplane-front-proxy-ca"); err != nil {
		return nil, err
	}
	if c.FrontProxyClient, err = s.EnsureCert(c.FrontProxyCA, CertSpec{
		Name: FrontProxyClientName, CommonName: FrontProxyClientCN, Usages: client,
	}); err != nil {
		return nil, err
	}
	if c.ServiceAccountKey, c.ServiceAccountPub, err = s.EnsureSigningKey(ServiceAccountKeyName); err != nil {
		return nil, err
	}
	return &c, nil
}

// KubeconfigCluster is the name of the one cluster, and of the one context,
// in the kubeconfigs KubeconfigFor makes.
const KubeconfigCluster = "steadyplane"

// KubeconfigFor returns a kubeconfig that reaches server (an https URL)
// trusting ca and authenticating with kp.
func KubeconfigFor(server, userName string, ca *Authority, kp *KeyPair) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[KubeconfigCluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca.CertPEM}
	cfg.AuthInfos[userName] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts[KubeconfigCluster] = &clientcmdapi.Context{Cluster: KubeconfigCluster, AuthInfo: userName}
	cfg.CurrentContext = KubeconfigCluster
	return cfg
}

// KubeconfigForFiles is KubeconfigFor naming kp's files instead of holding
// them: client-go reads a named certificate again when it changes, so a
// program running with it takes a renewal up without a restart.
func KubeconfigForFiles(server, userName string, ca *Authority, kp *KeyPair) *clientcmdapi.Config {
	cfg := KubeconfigFor(server, userName, ca, kp)
	cfg.AuthInfos[userName] = &clientcmdapi.AuthInfo{ClientCertificate: kp.CertPath, ClientKey: kp.KeyPath}
	return cfg
}

// WriteKubeconfigFile writes cfg to path atomically and 0600: it holds a key.
func WriteKubeconfigFile(path string, cfg *clientcmdapi.Config) error {
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig %s: %w", path, err)
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil // rewritten at each renewal pass: only a change is written
	}
	return atomicfile.WriteFile(path, data, keyPerm)
}

func uniqueStrings(in []string) []string {
	seen := map[string]bool{}
	out := in[:0:0]
	for _, s := range in {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func uniqueIPs(in []net.IP) []net.IP {
	var out []net.IP
	for _, ip := range in {
		if ip == nil || ip.IsUnspecified() {
			continue
		}
		dup := false
		for _, o := range out {
			if o.Equal(ip) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, ip)
		}
	}
	return out
}
