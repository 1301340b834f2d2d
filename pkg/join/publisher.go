package join

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

// Publisher is a server other hosts can join: what it publishes for them.
type Publisher struct {
	// DataDir keeps the tokens (TokenFile, NodeTokenFile).
	DataDir string
	// PKI holds the cluster's CAs and keys, which a joining server gets
	// sealed; EncryptionConfig is the secrets encryption configuration.
	PKI              *pki.Cluster
	EncryptionConfig string
	// The cluster's ranges, domain and ports, which a joining server takes.
	ServiceCIDR, ClusterCIDR, ClusterDomain                string
	NodeCIDRMaskSize, EtcdClientPort, ReadinessWebhookPort int
	// ServerURL is this server's; Servers every API server (host:port),
	// this one first.
	ServerURL string
	Servers   []string
	// Logf reports progress and prints the join commands.
	Logf func(string, ...any)
}

// Publish keeps the server join token in <data-dir>/token and the worker
// token in <data-dir>/node-token (0600 both, made when missing), publishes
// what a joining server needs sealed for the first, and prints the
// commands that join another server and a worker. It returns the secrets
// encryption configuration it sealed (Rotated compares it).
func (p Publisher) Publish(ctx context.Context, client kubernetes.Interface) (sealedEncryption []byte, err error) {
	serverPath, nodePath := filepath.Join(p.DataDir, TokenFile), filepath.Join(p.DataDir, NodeTokenFile)
	tok, err := EnsureTokenFile(serverPath, p.PKI.CA.Cert)
	if err != nil {
		return nil, err
	}
	nodeTok, err := EnsureTokenFile(nodePath, p.PKI.CA.Cert)
	if err != nil {
		return nil, err
	}
	bundle, err := p.bundle()
	if err != nil {
		return nil, err
	}
	sealed, err := Seal(bundle, tok)
	if err != nil {
		return nil, err
	}
	if err := Publish(ctx, client, tok, sealed, p.PKI.CA.CertPEM, p.ServerURL, p.Servers, time.Time{}); err != nil {
		return nil, fmt.Errorf("publishing the join data: %w", err)
	}
	if err := PublishToken(ctx, client, nodeTok, time.Time{}, "steadyplane up: joins worker nodes (steadyplane node --server)"); err != nil {
		return nil, fmt.Errorf("publishing the node token: %w", err)
	}
	p.Logf("to join another server, copy %s (0600) to it and run there:", serverPath)
	p.Logf("  steadyplane up --bind-address <its address> --server %s --token-file <the copy>", p.ServerURL)
	p.Logf("to join a worker, copy %s (it opens no cluster key) and run there:", nodePath)
	p.Logf("  steadyplane node --server %s --token-file <the copy> --node-ip <its address>", p.ServerURL)
	return bundle.EncryptionConfig, nil
}

// Rotated says whether the secrets encryption configuration changed since
// sealed was published (a key rotation): a server that joins later must
// get the keys Secrets are written with now.
func (p Publisher) Rotated(sealed []byte) (bool, error) {
	now, err := os.ReadFile(p.EncryptionConfig)
	if err != nil {
		return false, err
	}
	return string(now) != string(sealed), nil
}

// bundle is what this server gives a joining one.
func (p Publisher) bundle() (*Bundle, error) {
	b := &Bundle{CACert: p.PKI.CA.CertPEM, EtcdCACert: p.PKI.EtcdCA.CertPEM, KubeletCACert: p.PKI.KubeletCA.CertPEM,
		ServiceCIDR: p.ServiceCIDR, ClusterCIDR: p.ClusterCIDR, NodeCIDRMaskSize: p.NodeCIDRMaskSize, ClusterDomain: p.ClusterDomain,
		EtcdClientPort: p.EtcdClientPort, ReadinessWebhookPort: p.ReadinessWebhookPort}
	var err error
	for _, f := range []struct {
		path string
		dst  *[]byte
	}{{p.PKI.CA.KeyPath, &b.CAKey}, {p.PKI.EtcdCA.KeyPath, &b.EtcdCAKey}, {p.PKI.KubeletCA.KeyPath, &b.KubeletCAKey}, {p.PKI.ServiceAccountKey, &b.ServiceAccountKey}, {p.EncryptionConfig, &b.EncryptionConfig}} {
		if *f.dst, err = os.ReadFile(f.path); err != nil {
			return nil, err
		}
	}
	return b, nil
}
