package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/kubernetes/cmd/kubeadm/app/util/pubkeypin"

	"github.com/steadyplane/steadyplane/pkg/join"
)

// DirName is where a server keeps its snapshots in its data directory,
// unless told another place.
const DirName = "snapshots"

// Server is a server's data directory as its snapshots need it: its
// etcd member's client URL and credentials, and the cluster it serves.
type Server struct {
	// Dir is where its snapshots are kept.
	Dir string
	// Endpoint is its own etcd member's client URL.
	Endpoint string
	// Cluster pins the cluster CA (Meta.Cluster).
	Cluster string
	// Node is its Node's name.
	Node string
	cfg  clientv3.Config
}

// ForDataDir is the server of dataDir: its member on loopback at the
// etcd client port the directory recorded (2379 unless told), reached
// with its API server's etcd client certificate; snapshots in dir
// (<data-dir>/snapshots when empty).
func ForDataDir(dataDir, dir string) (*Server, error) {
	st, err := join.LoadState(dataDir)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, caPEM, err := join.DataDirEtcdCredentials(dataDir)
	if err != nil {
		return nil, err
	}
	cfg, err := join.EtcdClientConfig(certPEM, keyPEM, caPEM)
	if err != nil {
		return nil, err
	}
	ca, err := join.ServerCA(dataDir)
	if err != nil {
		return nil, err
	}
	port := st.LocalEtcdClientPort
	if port == 0 {
		port = join.DefaultEtcdClientPort
	}
	if dir == "" {
		dir = filepath.Join(dataDir, DirName)
	}
	node := st.NodeName
	if node == "" {
		node, _ = os.Hostname()
	}
	return &Server{Dir: dir, Endpoint: "https://127.0.0.1:" + strconv.Itoa(port), Cluster: pubkeypin.Hash(ca), Node: node, cfg: cfg}, nil
}

// Save takes a snapshot of the server's member now: a scheduled one, or
// one a user asked for.
func (s *Server) Save(ctx context.Context, scheduled bool) (Meta, error) {
	now := time.Now()
	return Save(ctx, s.cfg, s.Endpoint, s.Dir, Meta{Name: Name(s.Node, scheduled, now), Cluster: s.Cluster, Node: s.Node, Scheduled: scheduled, Created: now})
}
