package join

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
)

// StateFile is the data directory's record of the cluster it serves.
const StateFile = "cluster.json"

// AdminKubeconfig is the admin kubeconfig in a server's data directory.
const AdminKubeconfig = "admin.kubeconfig"

// DefaultEtcdClientPort is etcd's client port when a cluster names none.
const DefaultEtcdClientPort = 2379

// State is what a data directory keeps about its cluster beyond the PKI:
// whom it joined through, the cluster's ranges a joined server took, its
// node's pod range, and the API servers last seen, which every kubeconfig
// lists as alternatives (no load balancer needed).
type State struct {
	// JoinedFrom is the server this one joined through; empty on the
	// cluster's first server.
	JoinedFrom string `json:"joinedFrom,omitempty"`
	// Servers are the API servers (host:port) last seen in the kubernetes
	// EndpointSlice, this one included.
	Servers []string `json:"servers,omitempty"`
	// PodCIDR is a joined server's pod range.
	PodCIDR string `json:"podCIDR,omitempty"`
	// The cluster's ranges, domain and etcd port, as the join received them.
	ServiceCIDR      string `json:"serviceCIDR,omitempty"`
	ClusterCIDR      string `json:"clusterCIDR,omitempty"`
	NodeCIDRMaskSize int    `json:"nodeCIDRMaskSize,omitempty"`
	ClusterDomain    string `json:"clusterDomain,omitempty"`
	EtcdClientPort   int    `json:"etcdClientPort,omitempty"`
	// ReadinessWebhookPort is the cluster's (Bundle).
	ReadinessWebhookPort int `json:"readinessWebhookPort,omitempty"`
	// NodeName is the server's Node; LocalEtcdClientPort where its own
	// etcd member serves clients on loopback (what etcd-snapshot reaches).
	NodeName            string `json:"nodeName,omitempty"`
	LocalEtcdClientPort int    `json:"localEtcdClientPort,omitempty"`
	// TokensMade says that the cluster's first server made its first join
	// tokens: it makes none again, so that a revoked one stays revoked.
	TokensMade bool `json:"tokensMade,omitempty"`
}

// Joined says whether the data directory joined another server's cluster.
func (s State) Joined() bool { return s.JoinedFrom != "" }

// LoadState reads dir's cluster.json; a directory without one has the
// zero state.
func LoadState(dir string) (State, error) {
	var st State
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("%s: %w (it records the cluster this data directory joined; restore it or move the directory away)", filepath.Join(dir, StateFile), err)
	}
	return st, nil
}

// SaveState writes st as dir's cluster.json, atomically.
func SaveState(dir string, st State) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, StateFile), append(data, '\n'), 0o600)
}

// MergeServers lists self first, then the others in order, each once.
func MergeServers(self string, others []string) []string {
	out := []string{self}
	for _, s := range others {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// ServersFromSlices are the API servers (host:port, sorted) the kubernetes
// Service's EndpointSlices list as ready.
func ServersFromSlices(list []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range list {
		port := 0
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil || *p.Name == "https") {
				port = int(*p.Port)
			}
		}
		if port == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				hp := net.JoinHostPort(a, strconv.Itoa(port))
				if !slices.Contains(out, hp) {
					out = append(out, hp)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// ListServers reads the API servers from the kubernetes Service's
// EndpointSlices.
func ListServers(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	list, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	if err != nil {
		return nil, fmt.Errorf("listing the API servers: %w", err)
	}
	return ServersFromSlices(list.Items), nil
}

// AdminClient is an admin client from dataDir's kubeconfig, failing over
// between the servers it lists: a server's own API server may not serve
// yet, and the one it joined through may be gone.
func AdminClient(dataDir string) (kubernetes.Interface, error) {
	cfg, _, err := clientconfig.Load(filepath.Join(dataDir, AdminKubeconfig), clientconfig.Options{})
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 15 * time.Second
	return kubernetes.NewForConfig(cfg)
}
