package controlplane

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/controlplane/join"
	"github.com/steadyplane/steadyplane/pkg/etcd"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// tokenFile is where a server keeps the join token: the first server's
// own, a joined server's the one it joined with.
const tokenFile = "token"

// etcdJoin is a joining server's etcd member before it first starts.
type etcdJoin struct {
	id             uint64
	initialCluster string
	// endpoints are the other members' client URLs.
	endpoints []string
}

// joined says whether this data directory joined another server's cluster.
func (cp *ControlPlane) joined() bool { return cp.state.JoinedFrom != "" }

// prepareJoin, on a host told --server, reads the cluster's CA (pinned by
// the token), opens the join data sealed for the token and puts the
// cluster's keys in place, before the PKI is completed with this server's
// own certificates. A data directory that joined already is reused as
// is; one that holds another cluster's CA is refused (ImportCA), one a
// join left half-way is joined again.
func (cp *ControlPlane) prepareJoin(ctx context.Context) error {
	if cp.joined() {
		if cp.opts.Server != "" {
			cp.progressf("this data directory joined the cluster through %s already; --server and the token are not used again", cp.state.JoinedFrom)
		}
		return cp.takeClusterSettings()
	}
	if cp.opts.Server == "" {
		return nil
	}
	raw := cp.opts.Token
	if cp.opts.TokenFile != "" {
		b, err := os.ReadFile(cp.opts.TokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		raw = string(b)
	}
	tok, err := join.ParseToken(raw)
	if err != nil {
		return err
	}
	cp.progressf("joining the cluster of %s: checking its CA against the token", cp.opts.Server)
	info, err := join.Discover(ctx, cp.opts.Server, tok)
	if err != nil {
		return fmt.Errorf("joining %s: %w", cp.opts.Server, err)
	}
	b, err := join.FetchBundle(ctx, cp.opts.Server, info.CA, tok)
	if err != nil {
		return fmt.Errorf("joining %s: %w", cp.opts.Server, err)
	}
	store := cp.store()
	if err := store.ImportCA(pki.CAName, b.CACert, b.CAKey); err != nil {
		return err
	}
	if err := store.ImportCA(pki.EtcdCAName, b.EtcdCACert, b.EtcdCAKey); err != nil {
		return err
	}
	if err := store.ImportCA(pki.KubeletCAName, b.KubeletCACert, b.KubeletCAKey); err != nil {
		return err
	}
	if err := store.ImportSigningKey(pki.ServiceAccountKeyName, b.ServiceAccountKey); err != nil {
		return err
	}
	if len(b.EncryptionConfig) > 0 {
		if err := cp.ensureEncryptionConfig(b.EncryptionConfig); err != nil {
			return err
		}
	}
	cp.state = ClusterState{JoinedFrom: cp.opts.Server, Servers: info.Servers, ServiceCIDR: b.ServiceCIDR, ClusterCIDR: b.ClusterCIDR,
		NodeCIDRMaskSize: b.NodeCIDRMaskSize, ClusterDomain: b.ClusterDomain, EtcdClientPort: b.EtcdClientPort, ReadinessWebhookPort: b.ReadinessWebhookPort}
	if err := atomicfile.WriteFile(filepath.Join(cp.dataDir, tokenFile), []byte(tok.String()+"\n"), 0o600); err != nil {
		return err
	}
	if err := saveClusterState(cp.dataDir, cp.state); err != nil {
		return err
	}
	cp.progressf("received the cluster's CAs, service-account key and secrets encryption keys (sealed for the token); services %s, pods %s, domain %s", b.ServiceCIDR, b.ClusterCIDR, b.ClusterDomain)
	return cp.takeClusterSettings()
}

// takeClusterSettings makes the cluster's ranges (and readiness webhook port) this server's.
func (cp *ControlPlane) takeClusterSettings() error {
	st := cp.state
	cp.opts.ServiceCIDR, cp.opts.ClusterCIDR, cp.opts.NodeCIDRMaskSize, cp.opts.ClusterDomain = st.ServiceCIDR, st.ClusterCIDR, st.NodeCIDRMaskSize, st.ClusterDomain
	if st.PodCIDR != "" {
		cp.opts.PodCIDR = st.PodCIDR
	}
	if st.ReadinessWebhookPort != 0 {
		cp.opts.ReadinessWebhookPort = st.ReadinessWebhookPort
	}
	if cp.opts.NodeName == NewOptions().NodeName {
		// The first server's Node has the default name.
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("a joining server's node needs a name (--node-name): %w", err)
		}
		cp.opts.NodeName = strings.ToLower(host)
	}
	return nil
}

// prepareJoinedNode, on a joined server whose PKI is complete, learns the
// cluster's API servers, gives its node a pod range of its own (the Node
// is made with it, so that the controller manager allocates no other),
// and adds its etcd member as a learner when it has no data yet.
func (cp *ControlPlane) prepareJoinedNode(ctx context.Context) error {
	if !cp.joined() {
		return nil
	}
	// Its own server does not serve yet, and the one it joined through
	// may be gone: the admin kubeconfig's list fails over.
	client, err := failoverAdminClient(cp.dataDir)
	if err != nil {
		return err
	}
	if servers, err := listServers(ctx, client); err == nil && len(servers) > 0 {
		cp.state.Servers = servers
	} else if err != nil {
		cp.progressf("reading the cluster's API servers: %v (the kubeconfigs list the ones known)", err)
	}
	if cp.state.PodCIDR == "" {
		if err := cp.choosePodCIDR(ctx, client); err != nil {
			return err
		}
	}
	if err := saveClusterState(cp.dataDir, cp.state); err != nil {
		return err
	}
	// The admin kubeconfig, written with the PKI, lists every server now.
	if err := clientconfig.WriteKubeconfig(cp.kubeconfig, cp.APIServerURL(), "admin", cp.pki.CA, cp.pki.Admin, cp.alternatives()); err != nil {
		return err
	}
	// etcd makes member/ before it first reaches a peer; its log (wal/)
	// shows it ran.
	_, walErr := os.Stat(filepath.Join(cp.etcdDataDir(), "member", "wal"))
	if walErr == nil && len(cp.otherEtcdEndpoints()) == 0 {
		return nil // the only server (after a cluster reset): nobody to ask
	}
	cli, err := cp.etcdClient(cp.otherEtcdEndpoints())
	if err != nil {
		return err
	}
	defer cli.Close()
	if walErr == nil {
		return cp.resumePromotion(ctx, cli)
	}
	id, initial, err := etcd.AddLearner(ctx, cli, cp.etcdName(), cp.etcdPeerURL(), cp.progressf)
	if err != nil {
		return err
	}
	cp.etcdJoin = &etcdJoin{id: id, initialCluster: initial, endpoints: cp.otherEtcdEndpoints()}
	return nil
}

// resumePromotion, for a joined member that has run, promotes it first
// when it is still a learner (a start that ended before the promotion):
// a learner serves the API server nothing. When the other members cannot
// be asked, it starts as it is.
func (cp *ControlPlane) resumePromotion(ctx context.Context, cli *clientv3.Client) error {
	members, err := etcd.ListMembers(ctx, cli)
	if err != nil {
		cp.progressf("etcd: the other members do not answer (%v); starting this one as it is", err)
		return nil
	}
	if step, id := etcd.PlanJoin(members, cp.etcdPeerURL()); step == etcd.JoinResume {
		cp.progressf("etcd: this member is still a learner; it is promoted once caught up")
		cp.etcdJoin = &etcdJoin{id: id, initialCluster: etcd.InitialCluster(members, id, cp.etcdName()), endpoints: cp.otherEtcdEndpoints()}
	}
	return nil
}

// choosePodCIDR registers this server's Node and takes the pod range the
// controller manager allocates to it.
func (cp *ControlPlane) choosePodCIDR(ctx context.Context, client kubernetes.Interface) error {
	cidr, err := join.RegisterNode(ctx, client, cp.opts.NodeName, net.ParseIP(cp.nodeIP()), cp.progressf)
	if err != nil {
		return err
	}
	cp.state.PodCIDR, cp.opts.PodCIDR = cidr, cidr
	return nil
}

// hostAddress is the address this server's etcd serves other servers on:
// the advertised address when it is a host's (not loopback, not the pod
// bridge's address up made for a laptop cluster); nil otherwise.
func (cp *ControlPlane) hostAddress() net.IP {
	if cp.advertise == nil || cp.advertise.IsLoopback() || cp.advertise.IsUnspecified() || cp.bridgeAddress != nil {
		return nil
	}
	return cp.advertise
}

// etcdName is this server's etcd member name: the first server's is
// "steadyplane", a joined server's its node's.
func (cp *ControlPlane) etcdName() string {
	if cp.joined() {
		return cp.opts.NodeName
	}
	return "steadyplane"
}

func (cp *ControlPlane) etcdDataDir() string { return filepath.Join(cp.dataDir, "etcd") }

// etcdPeerURL is where the other members reach this one.
func (cp *ControlPlane) etcdPeerURL() string {
	host := "127.0.0.1"
	if ip := cp.hostAddress(); ip != nil {
		host = ip.String()
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(cp.opts.EtcdPeerPort))
}

// otherEtcdEndpoints are the client URLs of the other servers' members.
func (cp *ControlPlane) otherEtcdEndpoints() []string {
	self := ""
	if ip := cp.hostAddress(); ip != nil {
		self = ip.String()
	}
	var out []string
	for _, s := range cp.state.Servers {
		host, _, err := net.SplitHostPort(s)
		if err != nil || host == self {
			continue
		}
		out = append(out, "https://"+net.JoinHostPort(host, strconv.Itoa(cp.state.EtcdClientPort)))
	}
	return out
}

// etcdClient is a client of the members at endpoints, with the API
// server's etcd client certificate.
func (cp *ControlPlane) etcdClient(endpoints []string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("etcd: no member of the cluster is known to reach (servers %v)", cp.state.Servers)
	}
	return newEtcdClient(endpoints, cp.pki.APIServerEtcdClient.CertPEM, cp.pki.APIServerEtcdClient.KeyPEM, cp.pki.EtcdCA.CertPEM)
}

// newEtcdClient is a quiet etcd client of endpoints with a client
// certificate and the etcd CA (PEM).
func newEtcdClient(endpoints []string, certPEM, keyPEM, caPEM []byte) (*clientv3.Client, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	roots, err := certutil.NewPoolFromBytes(caPEM)
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}})
}

// afterEtcdStart, on a joining server, promotes its learner once caught
// up; on a server that others can join, it makes sure its member's peer
// URL is its host address (a data directory first started on loopback).
func (cp *ControlPlane) afterEtcdStart(ctx context.Context) error {
	if cp.etcdJoin != nil {
		cli, err := cp.etcdClient(cp.etcdJoin.endpoints)
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(ctx, cp.opts.ReadyTimeout)
		defer cancel()
		if err := etcd.Promote(ctx, cli, cp.etcdJoin.id, cp.progressf); err != nil {
			return err
		}
		cp.etcdJoin = nil
		return nil
	}
	if cp.hostAddress() == nil {
		return nil
	}
	cli, err := cp.etcdClient([]string{cp.etcdClientURL()})
	if err != nil {
		return err
	}
	defer cli.Close()
	changed, err := etcd.EnsurePeerURL(ctx, cli, cp.etcdPeerURL())
	if changed {
		cp.progressf("etcd: this member's peer URL is now %s (other servers join there)", cp.etcdPeerURL())
	}
	return err
}

// nodeTokenFile is where a server keeps the token for worker nodes: it
// asks for node credentials and cannot open the cluster's keys.
const nodeTokenFile = "node-token"

// ensureToken reads the join token kept at path (0600), or makes one; a
// token that pins another CA is an error.
func (cp *ControlPlane) ensureToken(path string) (join.Token, error) {
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		tok, err := join.ParseToken(string(raw))
		if err != nil {
			return join.Token{}, fmt.Errorf("%s: %w", path, err)
		}
		if err := tok.CheckCA(cp.pki.CA.Cert); err != nil {
			return join.Token{}, fmt.Errorf("%s: %w", path, err)
		}
		return tok, nil
	case os.IsNotExist(err):
		tok, err := join.NewToken(cp.pki.CA.Cert)
		if err != nil {
			return join.Token{}, err
		}
		return tok, atomicfile.WriteFile(path, []byte(tok.String()+"\n"), 0o600)
	default:
		return join.Token{}, err
	}
}

// publishJoin, on a server other hosts can reach, keeps the server join
// token in <data-dir>/token and the worker token in <data-dir>/node-token
// (0600 both), publishes what a joining server needs sealed for the first,
// and prints the commands that join another server and a worker.
func (cp *ControlPlane) publishJoin(ctx context.Context) error {
	if cp.hostAddress() == nil {
		return nil
	}
	serverPath, nodePath := filepath.Join(cp.dataDir, tokenFile), filepath.Join(cp.dataDir, nodeTokenFile)
	tok, err := cp.ensureToken(serverPath)
	if err != nil {
		return err
	}
	nodeTok, err := cp.ensureToken(nodePath)
	if err != nil {
		return err
	}
	bundle, err := cp.joinBundle()
	if err != nil {
		return err
	}
	sealed, err := join.Seal(bundle, tok)
	if err != nil {
		return err
	}
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	if err := join.Publish(ctx, client, tok, sealed, cp.pki.CA.CertPEM, cp.APIServerURL(), cp.alternatives(), time.Time{}); err != nil {
		return fmt.Errorf("publishing the join data: %w", err)
	}
	if err := join.PublishToken(ctx, client, nodeTok, time.Time{}, "steadyplane up: joins worker nodes (steadyplane node --server)"); err != nil {
		return fmt.Errorf("publishing the node token: %w", err)
	}
	cp.sealedEncryption = bundle.EncryptionConfig
	cp.progressf("to join another server, copy %s (0600) to it and run there:", serverPath)
	cp.progressf("  steadyplane up --bind-address <its address> --server %s --token-file <the copy>", cp.APIServerURL())
	cp.progressf("to join a worker, copy %s (it opens no cluster key) and run there:", nodePath)
	cp.progressf("  steadyplane node --server %s --token-file <the copy> --node-ip <its address>", cp.APIServerURL())
	return nil
}

// republishIfRotated seals the join data again when the secrets
// encryption keys changed since it was sealed (a rotation): a server that
// joins later must get the keys Secrets are written with now.
func (cp *ControlPlane) republishIfRotated(ctx context.Context) error {
	if cp.sealedEncryption == nil {
		return nil
	}
	now, err := os.ReadFile(cp.encryptionConfigPath())
	if err != nil || string(now) == string(cp.sealedEncryption) {
		return err
	}
	cp.progressf("the secrets encryption keys changed: sealing the join data again")
	return cp.publishJoin(ctx)
}

// joinBundle is what this server gives a joining one.
func (cp *ControlPlane) joinBundle() (*join.Bundle, error) {
	b := &join.Bundle{CACert: cp.pki.CA.CertPEM, EtcdCACert: cp.pki.EtcdCA.CertPEM, KubeletCACert: cp.pki.KubeletCA.CertPEM, ServiceCIDR: cp.opts.ServiceCIDR, ClusterCIDR: cp.opts.ClusterCIDR,
		NodeCIDRMaskSize: cp.opts.NodeCIDRMaskSize, ClusterDomain: cp.opts.ClusterDomain, EtcdClientPort: cp.opts.EtcdClientPort,
		ReadinessWebhookPort: cp.opts.ReadinessWebhookPort}
	var err error
	for _, f := range []struct {
		path string
		dst  *[]byte
	}{{cp.pki.CA.KeyPath, &b.CAKey}, {cp.pki.EtcdCA.KeyPath, &b.EtcdCAKey}, {cp.pki.KubeletCA.KeyPath, &b.KubeletCAKey}, {cp.pki.ServiceAccountKey, &b.ServiceAccountKey}, {cp.encryptionConfigPath(), &b.EncryptionConfig}} {
		if *f.dst, err = os.ReadFile(f.path); err != nil {
			return nil, err
		}
	}
	return b, nil
}
