package join

import (
	"context"
	"fmt"
	"net"
	"path/filepath"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

// Server is a host that joins a cluster as a server (up --server).
type Server struct {
	// URL is the API server it joins through; Token the server token.
	URL   string
	Token Token
	// DataDir is its data directory, where the token and State are kept.
	DataDir string
	// PKI is the data directory's PKI, which the cluster's CAs and keys go
	// into before the server's own certificates are made.
	PKI *pki.Store
	// WriteEncryption keeps the cluster's secrets encryption configuration.
	// It runs before the State is saved: once saved, the directory counts
	// as joined, and a crash in between would make the next start write a
	// new key of its own.
	WriteEncryption func([]byte) error
	// WriteAdmission keeps the cluster's admission configuration (Pod
	// Security), when the bundle has one; nil ignores it.
	WriteAdmission func([]byte) error
	// Logf reports progress.
	Logf func(string, ...any)
}

// JoinServer reads the cluster's CA (pinned by the token), opens the join
// data sealed for the token and puts the cluster's keys in place, then
// saves and returns the State the server starts from. A directory that
// holds another cluster's CA is refused (pki.Store.ImportCA).
func JoinServer(ctx context.Context, s Server) (State, error) {
	logf := s.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	logf("joining the cluster of %s: checking its CA against the token", s.URL)
	info, err := Discover(ctx, s.URL, s.Token)
	if err != nil {
		return State{}, fmt.Errorf("joining %s: %w", s.URL, err)
	}
	b, err := FetchBundle(ctx, s.URL, info.CA, s.Token)
	if err != nil {
		return State{}, fmt.Errorf("joining %s: %w", s.URL, err)
	}
	for _, ca := range []struct {
		name      string
		cert, key []byte
	}{{pki.CAName, b.CACert, b.CAKey}, {pki.EtcdCAName, b.EtcdCACert, b.EtcdCAKey}, {pki.KubeletCAName, b.KubeletCACert, b.KubeletCAKey}} {
		if err := s.PKI.ImportCA(ca.name, ca.cert, ca.key); err != nil {
			return State{}, err
		}
	}
	if len(b.FrontProxyCACert) > 0 && len(b.FrontProxyCAKey) > 0 {
		if err := s.PKI.ImportCA(pki.FrontProxyCAName, b.FrontProxyCACert, b.FrontProxyCAKey); err != nil {
			return State{}, err
		}
	}
	if err := s.PKI.ImportSigningKey(pki.ServiceAccountKeyName, b.ServiceAccountKey); err != nil {
		return State{}, err
	}
	if len(b.EncryptionConfig) > 0 {
		if err := s.WriteEncryption(b.EncryptionConfig); err != nil {
			return State{}, err
		}
	}
	if len(b.AdmissionConfig) > 0 && s.WriteAdmission != nil {
		if err := s.WriteAdmission(b.AdmissionConfig); err != nil {
			return State{}, err
		}
	}
	st := State{JoinedFrom: s.URL, Servers: info.Servers, ServiceCIDR: b.ServiceCIDR, ClusterCIDR: b.ClusterCIDR,
		NodeCIDRMaskSize: b.NodeCIDRMaskSize, ClusterDomain: b.ClusterDomain, EtcdClientPort: b.EtcdClientPort, ReadinessWebhookPort: b.ReadinessWebhookPort}
	if err := writeTokenFile(filepath.Join(s.DataDir, TokenFile), s.Token); err != nil {
		return State{}, err
	}
	if err := SaveState(s.DataDir, st); err != nil {
		return State{}, err
	}
	logf("received the cluster's CAs, service-account key and secrets encryption keys (sealed for the token); services %s, pods %s, domain %s", b.ServiceCIDR, b.ClusterCIDR, b.ClusterDomain)
	return st, nil
}

// RefreshJoined, on a joined server whose PKI is complete, learns the
// cluster's API servers and gives its node a pod range of its own (the
// Node is made with it, so that the controller manager allocates no
// other), and saves st. nodeName and nodeIP are its Node's.
func RefreshJoined(ctx context.Context, dataDir string, st *State, nodeName string, nodeIP net.IP, logf func(string, ...any)) error {
	client, err := AdminClient(dataDir)
	if err != nil {
		return err
	}
	if servers, err := ListServers(ctx, client); err == nil && len(servers) > 0 {
		st.Servers = servers
	} else if err != nil {
		logf("reading the cluster's API servers: %v (the kubeconfigs list the ones known)", err)
	}
	if st.PodCIDR == "" {
		cidr, err := RegisterNode(ctx, client, nodeName, nodeIP, logf)
		if err != nil {
			return err
		}
		st.PodCIDR = cidr
	}
	return SaveState(dataDir, *st)
}
