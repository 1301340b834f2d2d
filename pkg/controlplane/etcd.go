package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

func (cp *ControlPlane) etcdClientURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(cp.opts.EtcdClientPort)
}

func (cp *ControlPlane) etcdArgs() []string {
	m := EtcdMember{
		Name:           cp.etcdName(),
		DataDir:        cp.etcdDataDir(),
		ClientURL:      cp.etcdClientURL(),
		PeerURL:        cp.etcdPeerURL(),
		InitialCluster: cp.etcdName() + "=" + cp.etcdPeerURL(),
	}
	if ip := cp.hostAddress(); ip != nil {
		// Other servers' members and joining servers reach this one at
		// the host's address; its own API server stays on loopback.
		m.AdvertiseClientURL = "https://" + net.JoinHostPort(ip.String(), strconv.Itoa(cp.opts.EtcdClientPort))
	}
	if cp.etcdJoin != nil {
		m.InitialCluster, m.InitialClusterState = cp.etcdJoin.initialCluster, "existing"
	}
	return EtcdArgs(cp.pki, m)
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

func (cp *ControlPlane) etcdHTTPClient() (*http.Client, error) {
	pair, err := tls.X509KeyPair(cp.pki.APIServerEtcdClient.CertPEM, cp.pki.APIServerEtcdClient.KeyPEM)
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
	return poll(ctx, p, cp.opts.ReadyTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cp.etcdClientURL()+"/health", nil)
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
	if _, err := os.Stat(filepath.Join(cp.etcdDataDir(), "member", "wal")); err != nil {
		return fmt.Errorf("--cluster-reset: %s holds no etcd data to keep", cp.etcdDataDir())
	}
	cp.progressf("cluster reset: making this server's etcd member a cluster of one, with its data")
	p := &Process{Name: "etcd (cluster reset)", Binary: cp.opts.Binary, Args: append(cp.etcdArgs(), "--force-new-cluster"),
		LogPath: filepath.Join(cp.dataDir, "logs", "etcd-cluster-reset.log")}
	if err := p.Start(); err != nil {
		return err
	}
	err := cp.waitEtcdProcess(ctx, p)
	p.Stop(cp.opts.StopGrace)
	if err != nil {
		return fmt.Errorf("cluster reset: %w", err)
	}
	u, _ := url.Parse(cp.APIServerURL())
	cp.state.Servers = []string{u.Host}
	if err := saveClusterState(cp.dataDir, cp.state); err != nil {
		return err
	}
	cp.progressf("cluster reset done: this server is the cluster's only one; other servers join again with up --server from new data directories")
	cp.progressf("start up again without --cluster-reset (a reset on every start would drop the servers that joined since)")
	return nil
}
