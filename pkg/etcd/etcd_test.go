package etcd

import (
	"strings"
	"testing"
)

func TestConfigDefaults(t *testing.T) {
	o := NewOptions()
	o.DataDir = t.TempDir()
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.InitialCluster != "default=http://localhost:2380" {
		t.Errorf("initial cluster %q", cfg.InitialCluster)
	}
	if len(cfg.AdvertiseClientUrls) != 1 || cfg.AdvertiseClientUrls[0].String() != "http://localhost:2379" {
		t.Errorf("advertise defaults to listen: %v", cfg.AdvertiseClientUrls)
	}
	if cfg.ClientTLSInfo.ClientCertAuth {
		t.Error("client-cert auth without a CA")
	}
}

func TestConfigThreeMembers(t *testing.T) {
	o := NewOptions()
	o.Name = "m2"
	o.DataDir = t.TempDir()
	o.ListenClientURLs = []string{"https://10.1.0.2:2379"}
	o.ListenPeerURLs = []string{"https://10.1.0.2:2380"}
	o.InitialAdvertisePeerURLs = []string{"https://10.1.0.2:2380"}
	o.InitialCluster = "m1=https://10.1.0.1:2380,m2=https://10.1.0.2:2380,m3=https://10.1.0.3:2380"
	o.CertFile, o.KeyFile, o.TrustedCAFile = "s.crt", "s.key", "ca.crt"
	o.PeerCertFile, o.PeerKeyFile, o.PeerTrustedCAFile = "s.crt", "s.key", "ca.crt"
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.ClientTLSInfo.ClientCertAuth || !cfg.PeerTLSInfo.ClientCertAuth {
		t.Error("certificate auth not on although CAs are given")
	}
	if cfg.InitialCluster != o.InitialCluster {
		t.Errorf("initial cluster %q", cfg.InitialCluster)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantErr string
	}{
		{"bad url", func(o *Options) { o.ListenClientURLs = []string{"127.0.0.1:2379"} }, "listen-client-urls"},
		{"url with path", func(o *Options) { o.ListenPeerURLs = []string{"http://127.0.0.1:2380/x"} }, "path"},
		{"no urls", func(o *Options) { o.ListenClientURLs = nil }, "at least one"},
		{"bad state", func(o *Options) { o.InitialClusterState = "old" }, "initial-cluster-state"},
		{"cert without key", func(o *Options) { o.CertFile = "a.crt" }, "--cert-file and --key-file"},
		{"cert with http", func(o *Options) { o.CertFile, o.KeyFile = "a", "b" }, "plain text"},
		{"https without cert", func(o *Options) { o.ListenClientURLs = []string{"https://127.0.0.1:2379"} }, "needs a certificate"},
		{"member missing from cluster", func(o *Options) { o.InitialCluster = "other=http://localhost:2380" }, "does not list this member"},
		{"garbage cluster", func(o *Options) { o.InitialCluster = "=::" }, "initial-cluster"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			o.DataDir = t.TempDir()
			tc.mutate(o)
			_, err := o.Config()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestConfigElectionTimeout(t *testing.T) {
	o := NewOptions()
	o.DataDir = t.TempDir()
	o.HeartbeatMs, o.ElectionMs = 50, 250
	cfg, err := o.Config()
	if err != nil || cfg.TickMs != 50 || cfg.ElectionMs != 250 {
		t.Fatalf("50/250: %v, %+v", err, cfg)
	}
	o.ElectionMs = 200
	if _, err := o.Config(); err == nil || !strings.Contains(err.Error(), "--election-timeout=200") {
		t.Errorf("an election timeout under 5 heartbeats: %v", err)
	}
}
