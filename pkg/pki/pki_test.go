package pki

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
)

func newStore(t *testing.T) *Store {
	return &Store{Dir: filepath.Join(t.TempDir(), "pki"), Logf: t.Logf}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	certs, err := certutil.CertsFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func TestEnsureClusterCreatesEverything(t *testing.T) {
	s := newStore(t)
	advertise := net.ParseIP("10.0.0.7")
	c, err := s.EnsureCluster(ClusterConfig{APIServerIPs: []net.IP{advertise, net.ParseIP("10.96.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	api := readCert(t, c.APIServer.CertPath)
	for _, name := range append([]string{"localhost"}, KubernetesServiceDNSNames...) {
		if !slices.Contains(api.DNSNames, name) {
			t.Errorf("serving certificate lacks %s: %v", name, api.DNSNames)
		}
	}
	for _, ip := range []string{"127.0.0.1", "10.0.0.7", "10.96.0.1"} {
		if !slices.ContainsFunc(api.IPAddresses, net.ParseIP(ip).Equal) {
			t.Errorf("serving certificate lacks %s: %v", ip, api.IPAddresses)
		}
	}
	if _, err := api.Verify(x509.VerifyOptions{DNSName: "kubernetes.default", Roots: pool(c.CA)}); err != nil {
		t.Errorf("serving certificate does not verify as kubernetes.default: %v", err)
	}
	admin := readCert(t, c.Admin.CertPath)
	if !slices.Equal(admin.Subject.Organization, []string{MastersGroup}) {
		t.Errorf("admin organization %v", admin.Subject.Organization)
	}
	if _, err := admin.Verify(x509.VerifyOptions{Roots: pool(c.CA), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate: %v", err)
	}
	// The kubelet client is a client of the cluster CA, not in system:masters.
	kubeletClient := readCert(t, c.APIServerKubeletClient.CertPath)
	if _, err := kubeletClient.Verify(x509.VerifyOptions{Roots: pool(c.CA), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || len(kubeletClient.Subject.Organization) != 0 {
		t.Errorf("kubelet client certificate: %v, organization %v; want a client of the cluster CA in no group", err, kubeletClient.Subject.Organization)
	}
	// The etcd client certificate must not be trusted by the cluster CA, and
	// cluster client certificates must not open etcd.
	etcdClient := readCert(t, c.APIServerEtcdClient.CertPath)
	if _, err := etcdClient.Verify(x509.VerifyOptions{Roots: pool(c.CA), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Error("etcd client certificate verifies against the cluster CA")
	}
	if _, err := admin.Verify(x509.VerifyOptions{Roots: pool(c.EtcdCA), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Error("admin certificate verifies against the etcd CA")
	}
	// The kubelet CA is a third one: what it signs (node serving
	// certificates, names the nodes chose) never passes for the cluster's.
	if c.KubeletCA == nil || c.KubeletCA.Cert.Equal(c.CA.Cert) || c.KubeletCA.Cert.Equal(c.EtcdCA.Cert) {
		t.Error("no kubelet CA of its own")
	}
	// The front proxy's CA is a fourth: extension API servers believe the
	// user its client names in headers, so nothing else it signs.
	if c.FrontProxyCA == nil || c.FrontProxyCA.Cert.Equal(c.CA.Cert) || c.FrontProxyClient == nil {
		t.Fatal("no front-proxy CA of its own, or no front-proxy-client certificate")
	}
	proxy := parseCert(t, c.FrontProxyClient.CertPEM)
	if err := proxy.CheckSignatureFrom(c.FrontProxyCA.Cert); err != nil || proxy.Subject.CommonName != FrontProxyClientCN {
		t.Errorf("front-proxy-client %q: %v; want it of the front-proxy CA", proxy.Subject.CommonName, err)
	}
	if proxy.CheckSignatureFrom(c.CA.Cert) == nil {
		t.Error("front-proxy-client verifies against the cluster CA")
	}

	// Every key is 0600.
	entries, _ := os.ReadDir(s.Dir)
	keys := 0
	for _, e := range entries {
		info, _ := e.Info()
		if strings.HasSuffix(e.Name(), ".key") {
			keys++
			if info.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %v, want 0600", e.Name(), info.Mode().Perm())
			}
		}
	}
	if keys != 11 {
		t.Errorf("%d key files, want 11", keys)
	}
	if st, _ := os.Stat(s.Dir); st.Mode().Perm() != 0o700 {
		t.Errorf("PKI directory mode %v", st.Mode().Perm())
	}
}

func pool(a *Authority) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.Cert)
	return p
}

func TestEnsureClusterReusesFiles(t *testing.T) {
	s := newStore(t)
	cfg := ClusterConfig{APIServerIPs: []net.IP{net.ParseIP("10.0.0.7")}}
	first, err := s.EnsureCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.EnsureCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if string(first.APIServer.CertPEM) != string(second.APIServer.CertPEM) || string(first.CA.CertPEM) != string(second.CA.CertPEM) {
		t.Error("a second start issued new certificates although the old ones fit")
	}
}

func TestNewAddressReissuesServingCertKeepingKeyAndCA(t *testing.T) {
	s := newStore(t)
	first, err := s.EnsureCluster(ClusterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.EnsureCluster(ClusterConfig{APIServerIPs: []net.IP{net.ParseIP("192.0.2.10")}})
	if err != nil {
		t.Fatal(err)
	}
	if string(first.APIServer.CertPEM) == string(second.APIServer.CertPEM) {
		t.Fatal("serving certificate not issued again for a new address")
	}
	if string(first.APIServer.KeyPEM) != string(second.APIServer.KeyPEM) {
		t.Error("reissuing changed the key")
	}
	if string(first.CA.CertPEM) != string(second.CA.CertPEM) {
		t.Error("reissuing changed the CA")
	}
	if !slices.ContainsFunc(readCert(t, second.APIServer.CertPath).IPAddresses, net.ParseIP("192.0.2.10").Equal) {
		t.Error("new address missing")
	}
}

func TestCertsAreRenewedAtTwoThirdsOfTheirLifetime(t *testing.T) {
	for _, tc := range []struct {
		name     string
		validity time.Duration
		after    time.Duration // since the first issue
		renewed  bool
	}{
		{"a year, after a day", 0, 24 * time.Hour, false},
		{"a year, before two thirds", 0, 240 * 24 * time.Hour, false},
		{"a year, after two thirds", 0, 245 * 24 * time.Hour, true},
		{"90 s, after 50 s", 90 * time.Second, 50 * time.Second, false},
		{"90 s, after 60 s", 90 * time.Second, 60 * time.Second, true},
		{"90 s, after it ended", 90 * time.Second, 100 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			now := time.Now()
			s.Now = func() time.Time { return now }
			s.Validity = tc.validity
			first, err := s.EnsureCluster(ClusterConfig{})
			if err != nil {
				t.Fatal(err)
			}
			now = now.Add(tc.after)
			second, err := s.EnsureCluster(ClusterConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if renewed := string(first.Admin.CertPEM) != string(second.Admin.CertPEM); renewed != tc.renewed {
				t.Errorf("renewed: %v, want %v", renewed, tc.renewed)
			}
			if string(first.Admin.KeyPEM) != string(second.Admin.KeyPEM) {
				t.Error("the key changed: a renewal keeps it, so that a reader never meets a certificate without its key")
			}
			if string(first.CA.CertPEM) != string(second.CA.CertPEM) {
				t.Error("the CA changed")
			}
		})
	}
}

// TestNoRenewalPastTheCA: in the CA's last months a certificate is
// renewed up to the CA's end, and then no more: a new one would end at
// the same time.
func TestNoRenewalPastTheCA(t *testing.T) {
	s := newStore(t)
	now := time.Now()
	s.Now = func() time.Time { return now }
	c, err := s.EnsureCluster(ClusterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	caEnd := c.CA.Cert.NotAfter
	now = caEnd.Add(-100 * 24 * time.Hour)
	capped, err := s.EnsureCluster(ClusterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if got := parseCert(t, capped.Admin.CertPEM).NotAfter; !got.Equal(caEnd) {
		t.Fatalf("renewed 100 days before the CA's end: ends %v, want the CA's end %v", got, caEnd)
	}
	now = caEnd.Add(-time.Hour)
	again, err := s.EnsureCluster(ClusterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Admin.CertPEM) != string(capped.Admin.CertPEM) {
		t.Error("a certificate ending with its CA was issued again: it could end no later")
	}
}

func TestAShorterValidityAppliesAtOnce(t *testing.T) {
	s := newStore(t)
	first, err := s.EnsureCluster(ClusterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s.Validity = time.Hour
	second, err := s.EnsureCluster(ClusterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if string(first.APIServer.CertPEM) == string(second.APIServer.CertPEM) {
		t.Error("a certificate valid for a year is kept when an hour is asked for")
	}
	c := parseCert(t, second.APIServer.CertPEM)
	if got := c.NotAfter.Sub(c.NotBefore); got != time.Hour+Backdate(time.Hour) {
		t.Errorf("lifetime %v, want an hour and %v", got, Backdate(time.Hour))
	}
}

func TestRenewalTime(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		lifetime, want time.Duration
	}{
		{3 * time.Hour, 2 * time.Hour},
		{90 * time.Second, 60 * time.Second},
		{365 * 24 * time.Hour, 2 * 365 * 24 * time.Hour / 3},
	} {
		c := &x509.Certificate{NotBefore: start, NotAfter: start.Add(tc.lifetime)}
		if got := RenewalTime(c).Sub(start); got != tc.want {
			t.Errorf("lifetime %v: renewed after %v, want %v", tc.lifetime, got, tc.want)
		}
	}
	// The controller manager's signer starts a 75 s certificate five
	// minutes before it issues it: its lifetime counts from its writing.
	issued := start.Add(5 * time.Minute)
	signed := &x509.Certificate{NotBefore: start, NotAfter: issued.Add(75 * time.Second)}
	if got := RenewalTimeOf(signed, issued).Sub(issued); got != 50*time.Second {
		t.Errorf("a backdated 75 s certificate is renewed %v after its writing, want 50s", got)
	}
	if got := RenewalTimeOf(signed, signed.NotAfter.Add(-time.Second)).Sub(signed.NotAfter); got != 9*time.Second {
		t.Errorf("a certificate written a second before its end is renewed %v after it, want %v (MinRenewalGap)", got, MinRenewalGap-time.Second)
	}
	if Backdate(LeafValidity) != 5*time.Minute || Backdate(90*time.Second) != 9*time.Second {
		t.Errorf("backdates %v and %v, want 5m and 9s", Backdate(LeafValidity), Backdate(90*time.Second))
	}
}

func TestDamagedFiles(t *testing.T) {
	t.Run("corrupt leaf is issued again", func(t *testing.T) {
		s := newStore(t)
		c, err := s.EnsureCluster(ClusterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(c.APIServer.CertPath, []byte("-----BEGIN CERTIFICATE-----\ngarbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		c2, err := s.EnsureCluster(ClusterConfig{})
		if err != nil {
			t.Fatalf("a torn leaf certificate should be issued again: %v", err)
		}
		readCert(t, c2.APIServer.CertPath)
	})
	t.Run("corrupt CA is an error naming the file", func(t *testing.T) {
		s := newStore(t)
		c, err := s.EnsureCluster(ClusterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(c.CA.CertPath)
		if err := os.WriteFile(filepath.Join(s.Dir, "ca.key"), []byte("not a key"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = s.EnsureCluster(ClusterConfig{})
		if err == nil || !strings.Contains(err.Error(), "ca.key") {
			t.Fatalf("err = %v, want an error naming ca.key", err)
		}
		after, _ := os.ReadFile(c.CA.CertPath)
		if string(before) != string(after) {
			t.Error("the CA certificate was replaced")
		}
	})
	t.Run("a CA key without its certificate gets the certificate again", func(t *testing.T) {
		// A kill -9 between the two writes leaves the key alone (it is
		// written first).
		s := newStore(t)
		first, err := s.EnsureCluster(ClusterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(s.Dir, "etcd-ca.crt")); err != nil {
			t.Fatal(err)
		}
		again, err := s.EnsureCluster(ClusterConfig{})
		if err != nil {
			t.Fatalf("EnsureCluster after losing etcd-ca.crt: %v", err)
		}
		if !publicKeysEqual(again.EtcdCA.Cert.PublicKey, first.EtcdCA.Cert.PublicKey) {
			t.Error("the etcd CA got a new key")
		}
		// What the key signed before still verifies against the new certificate.
		roots := x509.NewCertPool()
		roots.AddCert(again.EtcdCA.Cert)
		leaf, err := certutil.ParseCertsPEM(first.EtcdServer.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("etcd server certificate from before no longer verifies: %v", err)
		}
	})
	t.Run("a CA certificate without its key is an error", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.EnsureCluster(ClusterConfig{}); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(s.Dir, "etcd-ca.key")); err != nil {
			t.Fatal(err)
		}
		_, err := s.EnsureCluster(ClusterConfig{})
		if err == nil || !strings.Contains(err.Error(), "without its key") {
			t.Fatalf("err = %v", err)
		}
		if _, err := os.Stat(filepath.Join(s.Dir, "etcd-ca.key")); err == nil {
			t.Error("a new etcd CA key was made beside the remaining certificate")
		}
	})
	t.Run("CA key of another CA", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.EnsureCluster(ClusterConfig{}); err != nil {
			t.Fatal(err)
		}
		other, _ := os.ReadFile(filepath.Join(s.Dir, "etcd-ca.key"))
		if err := os.WriteFile(filepath.Join(s.Dir, "ca.key"), other, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EnsureCluster(ClusterConfig{}); err == nil || !strings.Contains(err.Error(), "does not belong") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("corrupt service-account key is an error", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.EnsureCluster(ClusterConfig{}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.Dir, "sa.key"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EnsureCluster(ClusterConfig{}); err == nil || !strings.Contains(err.Error(), "sa.key") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestWriteKubeconfig(t *testing.T) {
	s := newStore(t)
	c, err := s.EnsureCluster(ClusterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := WriteKubeconfigFile(path, KubeconfigFor("https://127.0.0.1:6443", "admin", c.CA, c.Admin)); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v", st.Mode().Perm())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || len(cfg.CAData) == 0 || len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 || cfg.Insecure {
		t.Errorf("unexpected rest config %+v", cfg)
	}
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}
