package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/steadyplane/steadyplane/pkg/etcd/snapshot"
	"github.com/steadyplane/steadyplane/pkg/join"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// prepareEtcd decides etcd's process: this server's member, joining the
// cluster when etcdJoin says so.
func (cp *ControlPlane) prepareEtcd() error {
	cp.Etcd = &Process{Name: "etcd", Binary: cp.opts.Binary, Args: cp.etcdArgs(), LogPath: cp.dir.log("etcd")}
	return nil
}

func (cp *ControlPlane) etcdArgs() []string {
	m := EtcdMember{
		Name:           cp.etcdName(),
		DataDir:        cp.dir.etcdData(),
		ClientURL:      cp.addr.etcdClientURL(),
		PeerURL:        cp.addr.etcdPeerURL(),
		InitialCluster: cp.etcdName() + "=" + cp.addr.etcdPeerURL(),
	}
	if ip := cp.addr.host(); ip != nil {
		// Other servers' members and joining servers reach this one at
		// the host's address; its own API server stays on loopback.
		m.AdvertiseClientURL = "https://" + net.JoinHostPort(ip.String(), strconv.Itoa(cp.opts.EtcdClientPort))
	}
	if cp.etcdJoin != nil {
		m.InitialCluster, m.InitialClusterState = cp.etcdJoin.InitialCluster, "existing"
	}
	// The cluster's only member needs no votes but its own: waiting out a
	// full election timeout at every start (up to a second of etcd's
	// default) protects nothing. Servers that join later keep etcd's
	// defaults, and pre-vote keeps this one from disturbing their leader.
	m.Lone = !cp.joined() && cp.etcdJoin == nil && len(cp.state.Servers) <= 1
	return EtcdArgs(cp.pki, m)
}

// etcdPod is etcd's static pod: its data and the PKI.
func (cp *ControlPlane) etcdPod(binary string) staticpod.Spec {
	return staticpod.Spec{Name: etcdComponent, Binary: binary, Args: cp.Etcd.Args,
		HostPaths: []staticpod.HostPath{cp.pkiPath(), {Path: cp.dir.etcdData()}}}
}

// EtcdMember is what differs between the members of an etcd cluster.
type EtcdMember struct {
	Name, DataDir, ClientURL, PeerURL string
	// AdvertiseClientURL, when set, is listened on besides ClientURL and
	// announced to the cluster instead of it.
	AdvertiseClientURL string
	// InitialCluster is etcd's --initial-cluster: name=peerURL,...
	InitialCluster string
	// InitialClusterState is "existing" for a member joining a running
	// cluster; empty means "new".
	InitialClusterState string
	// Lone is the cluster's only member: it elects itself in a quarter of
	// a second (heartbeat 50ms, election 250ms) instead of up to a second.
	Lone bool
}

// EtcdArgs returns the arguments of "steadyplane etcd" for member m, with
// TLS and client-certificate auth from the cluster's etcd CA.
func EtcdArgs(p *pki.Cluster, m EtcdMember) []string {
	listen, advertise := m.ClientURL, m.ClientURL
	if m.AdvertiseClientURL != "" {
		listen, advertise = m.ClientURL+","+m.AdvertiseClientURL, m.AdvertiseClientURL
	}
	args := []string{
		"etcd",
		"--name=" + m.Name,
		"--data-dir=" + m.DataDir,
		"--listen-client-urls=" + listen,
		"--advertise-client-urls=" + advertise,
		"--listen-peer-urls=" + m.PeerURL,
		"--initial-advertise-peer-urls=" + m.PeerURL,
		"--initial-cluster=" + m.InitialCluster,
		"--cert-file=" + p.EtcdServer.CertPath,
		"--key-file=" + p.EtcdServer.KeyPath,
		"--trusted-ca-file=" + p.EtcdCA.CertPath,
		"--peer-cert-file=" + p.EtcdServer.CertPath,
		"--peer-key-file=" + p.EtcdServer.KeyPath,
		"--peer-trusted-ca-file=" + p.EtcdCA.CertPath,
	}
	if m.InitialClusterState != "" {
		args = append(args, "--initial-cluster-state="+m.InitialClusterState)
	}
	if m.Lone {
		args = append(args, "--heartbeat-interval=50", "--election-timeout=250")
	}
	return args
}

// StartEtcd starts etcd and waits until it answers /health.
func (cp *ControlPlane) StartEtcd(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	if err := cp.launcher.Start(ctx, etcdComponent); err != nil {
		return 0, err
	}
	if err := cp.waitEtcd(ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// waitEtcdMember waits until this server's member serves: a joining
// member is promoted once caught up, and serves only then; a member others
// can join gets its host address as peer URL.
func (cp *ControlPlane) waitEtcdMember(ctx context.Context) error {
	member := cp.localMember()
	if j := cp.etcdJoin; j != nil {
		if err := member.AfterStart(ctx, j, cp.addr.host() != nil, cp.opts.ReadyTimeout); err != nil {
			return err
		}
		cp.etcdJoin = nil
		return cp.waitEtcd(ctx)
	}
	if err := cp.waitEtcd(ctx); err != nil {
		return err
	}
	return member.AfterStart(ctx, nil, cp.addr.host() != nil, cp.opts.ReadyTimeout)
}

func (cp *ControlPlane) etcdHTTPClient() (*http.Client, error) {
	certPEM, keyPEM, _, err := join.DataDirEtcdCredentials(string(cp.dir))
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(cp.pki.EtcdCA.Cert)
	return &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}},
	}, nil
}

func (cp *ControlPlane) waitEtcd(ctx context.Context) error {
	return cp.waitEtcdProcess(ctx, cp.launcher.Runner(etcdComponent))
}

// waitEtcdProcess waits until the etcd member p runs answers /health.
func (cp *ControlPlane) waitEtcdProcess(ctx context.Context, p *Process) error {
	client, err := cp.etcdHTTPClient()
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	return poll(ctx, p, cp.opts.ReadyTimeout, readyPoll, func(ctx context.Context) (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cp.addr.etcdClientURL()+"/health", nil)
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var health struct {
			Health string `json:"health"`
			Reason string `json:"reason"`
		}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&health)
		if resp.StatusCode == http.StatusOK && health.Health == "true" {
			return true, ""
		}
		return false, fmt.Sprintf("/health: %d %s", resp.StatusCode, health.Reason)
	})
}

// resetEtcd makes this server's etcd member a cluster of one, with its
// data (etcd's --force-new-cluster, as k3s's --cluster-reset): the way
// back when the other servers are lost for good and the survivor cannot
// reach a quorum. The other servers must join again, from clean data
// directories.
func (cp *ControlPlane) resetEtcd(ctx context.Context) error {
	args, kept := append(cp.etcdArgs(), "--force-new-cluster"), ""
	if path := cp.opts.ClusterResetRestorePath; path != "" {
		if err := cp.othersStopped(ctx); err != nil {
			return err
		}
		var err error
		if kept, err = cp.restoreEtcd(path); err != nil {
			return err
		}
		// The restored data has no raft log: the member starts a new
		// cluster of one, itself, under a token of its own, so that its
		// IDs are not the old cluster's (whose members would take it for
		// theirs and replace its data with their log).
		cp.etcdJoin = nil
		args = append(cp.etcdArgs(), fmt.Sprintf("--initial-cluster-token=steadyplane-restore-%d", time.Now().UnixNano()))
	} else if _, err := os.Stat(filepath.Join(cp.dir.etcdData(), "member", "wal")); err != nil {
		return fmt.Errorf("--cluster-reset: %s holds no etcd data to keep", cp.dir.etcdData())
	} else {
		cp.progressf("cluster reset: making this server's etcd member a cluster of one, with its data")
	}
	p := &Process{Name: "etcd (cluster reset)", Binary: cp.opts.Binary, Args: args, LogPath: cp.dir.log("etcd-cluster-reset")}
	if err := p.Start(); err != nil {
		return errors.Join(err, cp.undoRestore(kept))
	}
	err := cp.waitEtcdProcess(ctx, p)
	p.Stop(cp.opts.StopGrace)
	if err != nil {
		return errors.Join(fmt.Errorf("cluster reset: %w", err), cp.undoRestore(kept))
	}
	if kept != "" {
		cp.progressf("cluster reset: etcd runs on the snapshot's data; the data it had is kept in %s", kept)
	}
	u, _ := url.Parse(cp.APIServerURL())
	cp.state.Servers = []string{u.Host}
	if err := join.SaveState(string(cp.dir), cp.state); err != nil {
		return err
	}
	cp.progressf("cluster reset done: this server is the cluster's only one; other servers join again with up --server from new data directories")
	cp.progressf("start up again without --cluster-reset (a reset on every start would drop the servers that joined since)")
	return nil
}

// othersStopped refuses a restore while the etcd member of another
// server this one knows answers: it would go on with the old data, and
// the cluster would be two.
func (cp *ControlPlane) othersStopped(ctx context.Context) error {
	others := join.EtcdEndpoints(cp.state.Servers, cp.state.EtcdClientPort, cp.addr.hostString())
	if len(others) == 0 {
		return nil
	}
	certPEM, keyPEM, caPEM, err := join.DataDirEtcdCredentials(string(cp.dir))
	if err != nil {
		return err
	}
	cli, err := join.NewEtcdClient(others, certPEM, keyPEM, caPEM)
	if err != nil {
		return err
	}
	defer cli.Close()
	for _, ep := range others {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Status(sctx, ep)
		cancel()
		if err == nil {
			return fmt.Errorf("--cluster-reset-restore-path: the etcd member at %s answers: stop up on every server of the cluster first (a restore makes this server a cluster of one; the others join it again from clean data directories)", ep)
		}
	}
	return nil
}

// undoRestore puts back the etcd data a restore replaced (kept; "" when
// there was none), after the restored member failed to start.
func (cp *ControlPlane) undoRestore(kept string) error {
	if cp.opts.ClusterResetRestorePath == "" {
		return nil
	}
	if err := snapshot.Unswap(cp.dir.etcdData(), kept); err != nil {
		return fmt.Errorf("putting back the etcd data kept in %s: %w", kept, err)
	}
	cp.progressf("cluster reset: the restore did not finish; the data etcd had is back in place (the snapshot's: %s.restore-failed)", cp.dir.etcdData())
	return nil
}
