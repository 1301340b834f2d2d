package controlplane

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/join"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// joined says whether this data directory joined another server's cluster.
func (cp *ControlPlane) joined() bool { return cp.state.Joined() }

// prepareJoin, on a host told --server, joins the cluster (join.JoinServer:
// its CA pinned by the token, its keys sealed for it) before the PKI is
// completed with this server's own certificates. A data directory that
// joined already is reused as is; one that holds another cluster's CA is
// refused, one a join left half-way is joined again.
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
	tok, err := join.ReadToken(cp.opts.Token, cp.opts.TokenFile)
	if err != nil {
		return err
	}
	cp.state, err = join.JoinServer(ctx, join.Server{URL: cp.opts.Server, Token: tok, DataDir: string(cp.dir), PKI: cp.store(),
		WriteEncryption: cp.ensureEncryptionConfig, WriteAdmission: cp.keepClusterAdmission, Logf: cp.progressf})
	if err != nil {
		return err
	}
	return cp.takeClusterSettings()
}

// takeClusterSettings makes the cluster's ranges (and readiness webhook
// port) this server's.
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
// cluster's API servers, gives its node a pod range of its own, writes the
// admin kubeconfig with every server, and adds its etcd member as a
// learner when it has no data yet (join.LocalMember).
func (cp *ControlPlane) prepareJoinedNode(ctx context.Context) error {
	if !cp.joined() {
		return nil
	}
	if err := join.RefreshJoined(ctx, string(cp.dir), &cp.state, cp.opts.NodeName, net.ParseIP(cp.addr.node()), cp.progressf); err != nil {
		return err
	}
	cp.opts.PodCIDR = cp.state.PodCIDR
	if err := cp.writeAdminKubeconfig(); err != nil {
		return err
	}
	j, err := cp.localMember().Prepare(ctx)
	if err != nil {
		return err
	}
	cp.etcdJoin = j
	return nil
}

// localMember is this server's etcd member, with its etcd client
// credentials as the files hold them now (renewed while up runs).
func (cp *ControlPlane) localMember() join.LocalMember {
	certPEM, keyPEM, caPEM, err := join.DataDirEtcdCredentials(string(cp.dir))
	if err != nil {
		// Read at start already; a member without them says so when it dials.
		cp.progressf("etcd client credentials: %v", err)
	}
	return join.LocalMember{Name: cp.etcdName(), PeerURL: cp.addr.etcdPeerURL(), ClientURL: cp.addr.etcdClientURL(), DataDir: cp.dir.etcdData(),
		Others:  join.EtcdEndpoints(cp.state.Servers, cp.state.EtcdClientPort, cp.addr.hostString()),
		Servers: cp.state.Servers, CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: caPEM,
		Logf: cp.progressf}
}

// etcdName is this server's etcd member name: the first server's is
// "steadyplane", a joined server's its node's.
func (cp *ControlPlane) etcdName() string {
	if cp.joined() {
		return cp.opts.NodeName
	}
	return "steadyplane"
}

// publisher is this server as one others join.
func (cp *ControlPlane) publisher() join.Publisher {
	return join.Publisher{DataDir: string(cp.dir), PKI: cp.pki, EncryptionConfig: cp.dir.encryptionConfig(), AdmissionConfig: cp.admissionConfig,
		ServiceCIDR: cp.opts.ServiceCIDR, ClusterCIDR: cp.opts.ClusterCIDR, ClusterDomain: cp.opts.ClusterDomain,
		NodeCIDRMaskSize: cp.opts.NodeCIDRMaskSize, EtcdClientPort: cp.opts.EtcdClientPort, ReadinessWebhookPort: cp.opts.ReadinessWebhookPort,
		ServerURL: cp.APIServerURL(), Servers: cp.alternatives(), State: &cp.state, TokenTTL: cp.opts.TokenTTL, Logf: cp.progressf}
}

// publishJoin, on a server other hosts can reach, publishes what joining
// servers and workers need and prints how they join (join.Publisher).
func (cp *ControlPlane) publishJoin(ctx context.Context) error {
	if cp.addr.host() == nil {
		return nil
	}
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	sealed, err := cp.publisher().Publish(ctx, client)
	if err != nil {
		return err
	}
	cp.sealedEncryption = sealed
	return nil
}

// republishIfRotated seals the join data again when the secrets
// encryption keys changed since it was sealed (a rotation).
func (cp *ControlPlane) republishIfRotated(ctx context.Context) error {
	if cp.sealedEncryption == nil {
		return nil
	}
	if rotated, err := cp.publisher().Rotated(cp.sealedEncryption); err != nil || !rotated {
		return err
	}
	cp.progressf("the secrets encryption keys changed: sealing the join data again")
	return cp.publishJoin(ctx)
}

// writeAdminKubeconfig writes the admin kubeconfig, listing every API
// server known.
// It holds the admin certificate and key, not their files' names: it is
// copied to other machines. They are read from the files, which the
// renewal replaces while up runs.
func (cp *ControlPlane) writeAdminKubeconfig() error {
	kp, err := pki.ReadKeyPair(cp.pki.Admin.CertPath, cp.pki.Admin.KeyPath)
	if err != nil {
		return err
	}
	return clientconfig.WriteKubeconfig(cp.Kubeconfig(), cp.APIServerURL(), "admin", cp.pki.CA, kp, cp.alternatives())
}
