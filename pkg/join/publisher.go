package join

import (
	"context"
	"errors"
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
	// AdmissionConfig is the API server's admission configuration file
	// (Pod Security), given to joining servers; "" for none.
	AdmissionConfig string
	// The cluster's ranges, domain and ports, which a joining server takes.
	ServiceCIDR, ClusterCIDR, ClusterDomain                string
	NodeCIDRMaskSize, EtcdClientPort, ReadinessWebhookPort int
	// ServerURL is this server's; Servers every API server (host:port),
	// this one first.
	ServerURL string
	Servers   []string
	// State is the data directory's; Publish records in it that the
	// cluster's first tokens were made.
	State *State
	// TokenTTL is how long the tokens Publish makes are valid; 0 for ever.
	TokenTTL time.Duration
	// Logf reports progress and prints the join commands.
	Logf func(string, ...any)
}

// Publish publishes what joining hosts read (cluster-info, the join
// group's rights) and the join data sealed for every server token. On
// the cluster's first server, once, it makes the cluster's two join
// tokens, valid TokenTTL: <data-dir>/token for servers and
// <data-dir>/node-token for workers (0600 both). A token file whose
// token was deleted or expired is removed, never published again: what
// an administrator revoked stays revoked across restarts. It prints how
// to join, and returns the secrets encryption configuration it sealed
// (Rotated compares it).
func (p Publisher) Publish(ctx context.Context, client kubernetes.Interface) (sealedEncryption []byte, err error) {
	if err := publishCluster(ctx, client, p.PKI.CA.CertPEM, p.ServerURL, p.Servers); err != nil {
		return nil, fmt.Errorf("publishing the join data: %w", err)
	}
	bundle, err := p.bundle()
	if err != nil {
		return nil, err
	}
	if err := SealAll(ctx, client, bundle, false); err != nil {
		return nil, fmt.Errorf("sealing the join data: %w", err)
	}
	files := []struct {
		kind TokenKind
		path string
	}{{ServerToken, filepath.Join(p.DataDir, TokenFile)}, {WorkerToken, filepath.Join(p.DataDir, NodeTokenFile)}}
	alive := map[TokenKind]bool{}
	for _, f := range files {
		if alive[f.kind], err = p.keepTokenFile(ctx, client, f.kind, f.path, bundle); err != nil {
			return nil, err
		}
	}
	if !p.State.TokensMade && !p.State.Joined() {
		// Once per cluster, both made (or found revoked): a token file
		// removed from now on is not remade.
		p.State.TokensMade = true
		if err := SaveState(p.DataDir, *p.State); err != nil {
			return nil, err
		}
	}
	if alive[ServerToken] {
		p.Logf("to join another server, copy %s (0600) to it and run there:", files[0].path)
		p.Logf("  steadyplane up --bind-address <its address> --server %s --token-file <the copy>", p.ServerURL)
	}
	if alive[WorkerToken] {
		p.Logf("to join a worker, copy %s (it opens no cluster key) and run there:", files[1].path)
		p.Logf("  steadyplane node --server %s --token-file <the copy> --node-ip <its address>", p.ServerURL)
	}
	if !alive[ServerToken] || !alive[WorkerToken] {
		p.Logf("a join token for another host: steadyplane token create [--server] --data-dir %s (on any server)", p.DataDir)
	}
	return bundle.EncryptionConfig, nil
}

// keepTokenFile keeps the join token of kind at path as long as the
// cluster accepts it, and says whether it does: a file whose token is
// gone is removed; a missing one is made on the cluster's first start.
func (p Publisher) keepTokenFile(ctx context.Context, client kubernetes.Interface, kind TokenKind, path string, bundle *Bundle) (bool, error) {
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		tok, err := ParseToken(string(raw))
		if err != nil {
			return false, fmt.Errorf("%s: %w", path, err)
		}
		if err := tok.CheckCA(p.PKI.CA.Cert); err != nil {
			return false, fmt.Errorf("%s: %w", path, err)
		}
		alive, expires, err := TokenAlive(ctx, client, tok, time.Now())
		if alive && expires.IsZero() && p.TokenTTL > 0 {
			p.Logf("%s: token %s never expires (an earlier release made it): steadyplane token delete %s, then token create, gives one that does", path, tok.ID, tok.ID)
		}
		if err != nil || alive {
			return alive, err
		}
		p.Logf("%s: token %s was deleted or has expired: the file is removed (steadyplane token create makes another)", path, tok.ID)
		return false, os.Remove(path)
	case !os.IsNotExist(err):
		return false, err
	case p.State.TokensMade || p.State.Joined():
		return false, nil
	}
	tok, secret, err := CreateToken(ctx, client, p.PKI.CA.Cert, kind, p.TokenTTL, fmt.Sprintf("steadyplane up: joins a %s", kind))
	if err != nil {
		return false, err
	}
	if kind == ServerToken {
		err = sealFor(ctx, client, secret, bundle)
	}
	if err == nil {
		err = writeTokenFile(path, tok)
	}
	if err != nil {
		// Nobody holds it: the next start makes another.
		if _, derr := DeleteToken(ctx, client, tok.ID); derr != nil {
			err = errors.Join(err, derr)
		}
		return false, fmt.Errorf("the %s join token: %w", kind, err)
	}
	if p.TokenTTL > 0 {
		p.Logf("made the %s join token %s, valid for %v (--token-ttl)", kind, tok.ID, p.TokenTTL)
	}
	return true, nil
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
	if p.AdmissionConfig != "" {
		if b.AdmissionConfig, err = os.ReadFile(p.AdmissionConfig); err != nil {
			return nil, err
		}
	}
	if fp := p.PKI.FrontProxyCA; fp != nil {
		b.FrontProxyCACert = fp.CertPEM
		if b.FrontProxyCAKey, err = os.ReadFile(fp.KeyPath); err != nil {
			return nil, err
		}
	}
	return b, nil
}
