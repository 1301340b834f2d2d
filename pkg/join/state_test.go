package join

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

func TestServersFromSlices(t *testing.T) {
	https, port, other := "https", int32(6443), int32(80)
	yes, no := true, false
	slice := func(p *int32, name *string, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: name, Port: p}}, Endpoints: eps}
	}
	ep := func(ready *bool, addrs ...string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	for _, tc := range []struct {
		name   string
		slices []discoveryv1.EndpointSlice
		want   []string
	}{
		{name: "three servers, sorted", slices: []discoveryv1.EndpointSlice{slice(&port, &https, ep(&yes, "10.0.0.3"), ep(nil, "10.0.0.1"), ep(&yes, "10.0.0.2"))},
			want: []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"}},
		{name: "not ready is left out", slices: []discoveryv1.EndpointSlice{slice(&port, &https, ep(&yes, "10.0.0.1"), ep(&no, "10.0.0.2"))},
			want: []string{"10.0.0.1:6443"}},
		{name: "IPv6", slices: []discoveryv1.EndpointSlice{slice(&port, &https, ep(&yes, "fd00::1"))}, want: []string{"[fd00::1]:6443"}},
		{name: "a slice without the https port", slices: []discoveryv1.EndpointSlice{slice(&other, new(string), ep(&yes, "10.0.0.1"))}},
		{name: "duplicates across slices", slices: []discoveryv1.EndpointSlice{slice(&port, &https, ep(&yes, "10.0.0.1")), slice(&port, nil, ep(&yes, "10.0.0.1"))},
			want: []string{"10.0.0.1:6443"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ServersFromSlices(tc.slices); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMergeServers(t *testing.T) {
	got := MergeServers("10.0.0.2:6443", []string{"10.0.0.1:6443", "10.0.0.2:6443", "", "10.0.0.3:6443"})
	if want := []string{"10.0.0.2:6443", "10.0.0.1:6443", "10.0.0.3:6443"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestState(t *testing.T) {
	dir := t.TempDir()
	st, err := LoadState(dir)
	if err != nil || st.JoinedFrom != "" {
		t.Fatalf("a new directory: %+v, %v", st, err)
	}
	want := State{JoinedFrom: "https://10.0.0.1:6443", Servers: []string{"10.0.0.1:6443"}, PodCIDR: "10.244.1.0/24", ClusterCIDR: "10.244.0.0/16"}
	if err := SaveState(dir, want); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, StateFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cluster.json: %v, %v", fi, err)
	}
	got, err := LoadState(dir)
	if err != nil || got.JoinedFrom != want.JoinedFrom || got.PodCIDR != want.PodCIDR || !slices.Equal(got.Servers, want.Servers) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(`{"joinedFrom": "https://10.0.0.1:6443", "serv`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(dir); err == nil || !strings.Contains(err.Error(), StateFile) {
		t.Fatalf("a torn file: err = %v, want one naming %s", err, StateFile)
	}
}

// TestEtcdEndpoints: the other servers' etcd client URLs, on the cluster's
// port (the default when it names none), never this server's own.
func TestEtcdEndpoints(t *testing.T) {
	servers := []string{"10.0.0.1:6443", "10.0.0.2:6443", "[fd00::3]:6443", "no-port"}
	if got, want := EtcdEndpoints(servers, 12379, "10.0.0.2"), []string{"https://10.0.0.1:12379", "https://[fd00::3]:12379"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got, want := EtcdEndpoints(servers[:1], 0, ""), []string{"https://10.0.0.1:2379"}; !slices.Equal(got, want) {
		t.Errorf("no port: got %v, want %v", got, want)
	}
}
