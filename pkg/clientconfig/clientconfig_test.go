package clientconfig

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/internal/testpki"
	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// TestLoadFailsOverFromTheFirstRequest: a kubeconfig whose server is down
// and whose extension lists another API server works from its first
// request, which carries X-Kubernetes-If-Ready.
func TestLoadFailsOverFromTheFirstRequest(t *testing.T) {
	p := testpki.New(t)
	var ifReady atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Kubernetes-If-Ready") != "" {
			ifReady.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"major":"1","minor":"36","gitVersion":"v1.36.3"}`))
	}))
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		testci.CannotRun(t, "cannot listen on 127.0.0.2: %v", err)
	}
	srv.Listener = l
	kp, err := p.Store.EnsureCert(p.CA, pki.CertSpec{Name: "b", CommonName: "b", DNSNames: []string{altsvcclient.ServerName}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadHost := dead.Addr().String()
	dead.Close()

	client, err := p.Store.EnsureCert(p.CA, pki.CertSpec{Name: "u", CommonName: "u", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := WriteKubeconfig(path, "https://"+deadHost, "u", p.CA, client, []string{deadHost, srv.Listener.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v, mode %v", err, st.Mode().Perm())
	}
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if hosts, err := altsvcclient.HostsForServer(raw, "https://"+deadHost); err != nil || len(hosts) != 2 {
		t.Fatalf("written extension: %v, %v", hosts, err)
	}

	cfg, pool, err := Load(path, Options{AltSvc: altsvcclient.Options{CacheDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("first request with the kubeconfig's server down: %v", err)
	}
	if v.GitVersion != "v1.36.3" || pool.Current() != srv.Listener.Addr().String() || ifReady.Load() == 0 {
		t.Errorf("answered %q by %s, If-Ready seen %d times", v.GitVersion, pool.Current(), ifReady.Load())
	}
}

func TestLoadRefusesAnInsecureKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	doc := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context:\n    cluster: c\ncurrent-context: c\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(path, Options{}); err == nil || !strings.Contains(err.Error(), "insecure-skip-tls-verify") {
		t.Errorf("Load(insecure) = %v", err)
	}
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("KUBECACHEDIR", "/tmp/kc")
	if got := DefaultCacheDir(); got != "/tmp/kc/alternative-services" {
		t.Errorf("with KUBECACHEDIR: %s", got)
	}
	t.Setenv("KUBECACHEDIR", "")
	t.Setenv("HOME", "/home/u")
	if got := DefaultCacheDir(); got != "/home/u/.kube/cache/alternative-services" {
		t.Errorf("from HOME: %s", got)
	}
}
