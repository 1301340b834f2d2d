package join

import (
	"context"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// LocalMember is this server's etcd member, as "up" starts it.
type LocalMember struct {
	// Name and PeerURL are the member's; ClientURL is where this server's
	// own etcd answers; DataDir is its data.
	Name, PeerURL, ClientURL, DataDir string
	// Others are the other members' client URLs (EtcdEndpoints).
	Others []string
	// Servers are the cluster's API servers, for what an error says.
	Servers []string
	// CertPEM, KeyPEM and CAPEM authenticate to etcd (the API server's
	// etcd client certificate, the etcd CA).
	CertPEM, KeyPEM, CAPEM []byte
	// Logf reports progress.
	Logf func(string, ...any)
}

// EtcdJoin is a joining server's etcd member before it first starts.
type EtcdJoin struct {
	// ID is the member's; InitialCluster is etcd's --initial-cluster.
	ID             uint64
	InitialCluster string
	// Endpoints are the other members' client URLs.
	Endpoints []string
}

func (m LocalMember) client(endpoints []string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, errNoMember(m.Servers)
	}
	return NewEtcdClient(endpoints, m.CertPEM, m.KeyPEM, m.CAPEM)
}

// Prepare, on a joined server, adds the member as a learner when it has
// no data yet, or resumes the promotion of one that ran and is still a
// learner (a start that ended before its promotion): the EtcdJoin its
// start needs, nil when it starts as it is.
func (m LocalMember) Prepare(ctx context.Context) (*EtcdJoin, error) {
	// etcd makes member/ before it first reaches a peer; its log (wal/)
	// shows it ran.
	_, walErr := os.Stat(filepath.Join(m.DataDir, "member", "wal"))
	if walErr == nil && len(m.Others) == 0 {
		return nil, nil // the only server (after a cluster reset): nobody to ask
	}
	cli, err := m.client(m.Others)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	if walErr == nil {
		return m.resume(ctx, cli), nil
	}
	id, initial, err := AddLearner(ctx, cli, m.Name, m.PeerURL, m.Logf)
	if err != nil {
		return nil, err
	}
	return &EtcdJoin{ID: id, InitialCluster: initial, Endpoints: m.Others}, nil
}

// resume is the promotion still due of a member that has run; nil when
// it is a voting member, or the other members cannot be asked (it then
// starts as it is).
func (m LocalMember) resume(ctx context.Context, cli *clientv3.Client) *EtcdJoin {
	members, err := ListMembers(ctx, cli)
	if err != nil {
		m.Logf("etcd: the other members do not answer (%v); starting this one as it is", err)
		return nil
	}
	if step, id := PlanJoin(members, m.PeerURL); step == JoinResume {
		m.Logf("etcd: this member is still a learner; it is promoted once caught up")
		return &EtcdJoin{ID: id, InitialCluster: InitialCluster(members, id, m.Name), Endpoints: m.Others}
	}
	return nil
}

// AfterStart, on a joining server (j), promotes its learner once caught up,
// within timeout; on a server that others can join (onHost), it makes sure
// its member's peer URL is its host address (a data directory first
// started on loopback).
func (m LocalMember) AfterStart(ctx context.Context, j *EtcdJoin, onHost bool, timeout time.Duration) error {
	if j != nil {
		cli, err := m.client(j.Endpoints)
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return Promote(ctx, cli, j.ID, m.Logf)
	}
	if !onHost {
		return nil
	}
	cli, err := m.client([]string{m.ClientURL})
	if err != nil {
		return err
	}
	defer cli.Close()
	changed, err := EnsurePeerURL(ctx, cli, m.PeerURL)
	if changed {
		m.Logf("etcd: this member's peer URL is now %s (other servers join there)", m.PeerURL)
	}
	return err
}
