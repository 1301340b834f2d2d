package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
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
	"github.com/steadyplane/steadyplane/pkg/controlplane/join"
)

// clusterFile is the data directory's record of the cluster it serves.
const clusterFile = "cluster.json"

// ClusterState is what a data directory keeps about its cluster beyond the
// PKI: whom it joined through, the cluster's ranges a joined server took,
// its node's pod range, and the API servers last seen, which every
// kubeconfig lists as alternatives (no load balancer needed).
type ClusterState struct {
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
	// ReadinessWebhookPort is the cluster's (join.Bundle).
	ReadinessWebhookPort int `json:"readinessWebhookPort,omitempty"`
}

// LoadClusterState reads dir's cluster.json; a directory without one has
// the zero state.
func LoadClusterState(dir string) (ClusterState, error) {
	var st ClusterState
	data, err := os.ReadFile(filepath.Join(dir, clusterFile))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("%s: %w (it records the cluster this data directory joined; restore it or move the directory away)", filepath.Join(dir, clusterFile), err)
	}
	return st, nil
}

func saveClusterState(dir string, st ClusterState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, clusterFile), append(data, '\n'), 0o600)
}

// alternatives are the API servers written into the kubeconfigs'
// steadyplane.io/alternative-services extension: this server first (a
// client prefers its local server), then every other one last seen.
func (cp *ControlPlane) alternatives() []string {
	u, err := url.Parse(cp.APIServerURL())
	if err != nil {
		return nil
	}
	return MergeServers(u.Host, cp.state.Servers)
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

// listServers reads the API servers from the kubernetes Service's EndpointSlices.
func listServers(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	list, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	if err != nil {
		return nil, fmt.Errorf("listing the API servers: %w", err)
	}
	return ServersFromSlices(list.Items), nil
}

// refreshServers records the API servers the cluster lists now and, when
// they changed, writes the admin kubeconfig again with all of them: a
// client that starts while this server is down still finds the others.
// The components' kubeconfigs follow at the next start (running clients
// learn servers from Alt-Svc).
func (cp *ControlPlane) refreshServers(ctx context.Context) error {
	if cp.hostAddress() == nil {
		return nil // no other server can join one that is not on a host address
	}
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	servers, err := listServers(ctx, client)
	if err != nil {
		return err
	}
	if len(servers) == 0 || slices.Equal(servers, cp.state.Servers) {
		return nil
	}
	cp.state.Servers = servers
	cp.state.EtcdClientPort = cp.opts.EtcdClientPort
	if err := saveClusterState(cp.dataDir, cp.state); err != nil {
		return err
	}
	cp.progressf("API servers of the cluster: %v (the kubeconfigs list them all)", servers)
	if err := join.PublishServers(ctx, client, cp.pki.CA.CertPEM, cp.APIServerURL(), cp.alternatives()); err != nil {
		return err
	}
	return clientconfig.WriteKubeconfig(cp.kubeconfig, cp.APIServerURL(), "admin", cp.pki.CA, cp.pki.Admin, cp.alternatives())
}

// followServers refreshes the servers every interval until ctx ends.
func (cp *ControlPlane) followServers(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, interval)
		if err := cp.refreshServers(rctx); err != nil && ctx.Err() == nil {
			cp.progressf("reading the cluster's API servers: %v", err)
		}
		if err := cp.republishIfRotated(rctx); err != nil && ctx.Err() == nil {
			cp.progressf("sealing the join data again: %v", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
