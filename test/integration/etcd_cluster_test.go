package integration

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/util/cert"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/controlplane"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// TestThreeMemberEtcdCluster forms a three-member etcd cluster from three
// "steadyplane etcd" invocations with TLS and client-certificate auth on both
// client and peer traffic, writes through one member and reads through another,
// and checks that a client without a certificate is turned away.
func TestThreeMemberEtcdCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three etcd processes")
	}
	bin, err := testenv.Binary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	store := &pki.Store{Dir: filepath.Join(dir, "pki")}
	c, err := store.EnsureCluster(pki.ClusterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ports, err := testenv.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"m1", "m2", "m3"}
	var initial []string
	for i, n := range names {
		initial = append(initial, n+"=https://127.0.0.1:"+strconv.Itoa(ports[2*i+1]))
	}
	var members []*controlplane.Process
	var endpoints []string
	for i, n := range names {
		client := "https://127.0.0.1:" + strconv.Itoa(ports[2*i])
		peer := "https://127.0.0.1:" + strconv.Itoa(ports[2*i+1])
		endpoints = append(endpoints, client)
		p := &controlplane.Process{Name: n, Binary: bin, LogPath: filepath.Join(dir, n+".log"), Args: []string{
			"etcd", "--name=" + n, "--data-dir=" + filepath.Join(dir, n),
			"--listen-client-urls=" + client, "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=" + strings.Join(initial, ","), "--initial-cluster-token=steadyplane-test",
			"--cert-file=" + c.EtcdServer.CertPath, "--key-file=" + c.EtcdServer.KeyPath, "--trusted-ca-file=" + c.EtcdCA.CertPath,
			"--peer-cert-file=" + c.EtcdServer.CertPath, "--peer-key-file=" + c.EtcdServer.KeyPath, "--peer-trusted-ca-file=" + c.EtcdCA.CertPath,
			"--log-level=warn",
		}}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		defer p.Stop(10 * time.Second)
		members = append(members, p)
	}

	pair, err := tls.X509KeyPair(c.APIServerEtcdClient.CertPEM, c.APIServerEtcdClient.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots, err := cert.NewPoolFromBytes(c.EtcdCA.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	client := func(endpoint string, tc *tls.Config) *clientv3.Client {
		cl, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tc, DialTimeout: 2 * time.Second, Context: ctx})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	first, third := client(endpoints[0], tlsCfg), client(endpoints[2], tlsCfg)

	// The cluster forms once all three members have met.
	deadline := time.Now().Add(90 * time.Second)
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := first.Put(rctx, "/steadyplane/test", "written-through-m1")
		rcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			for _, m := range members {
				t.Logf("%s log:\n%s", m.Name, m.LogTail(10))
			}
			t.Fatalf("cluster did not accept a write: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	list, err := third.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 3 {
		t.Errorf("member list has %d members, want 3", len(list.Members))
	}
	resp, err := third.Get(ctx, "/steadyplane/test")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "written-through-m1" {
		t.Errorf("read through m3: %v", resp.Kvs)
	}

	// No client certificate, no etcd.
	noCert := client(endpoints[1], &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	defer rcancel()
	if _, err := noCert.Get(rctx, "/steadyplane/test"); err == nil {
		t.Error("a client without a certificate could read etcd")
	}
}
