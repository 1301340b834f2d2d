package altsvcclient

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/steadyplane/steadyplane/internal/testpki"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// TestAuthProvider: a program that builds its client from a kubeconfig with
// client-go alone (as kube-proxy does) fails over to the alternative its
// cluster lists, when the kubeconfig's user names the provider.
func TestAuthProvider(t *testing.T) {
	if err := RegisterAuthProvider(); err != nil {
		t.Fatal(err)
	}
	if err := RegisterAuthProvider(); err != nil {
		t.Fatalf("registering twice: %v", err)
	}
	p := testpki.New(t)
	live := startServer(t, p, p.CA, "live", "127.0.0.1", false)
	// A server that is down: a port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()

	dir := t.TempDir()
	write := func(name string, provider map[string]string, hosts []string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://" + dead, CertificateAuthorityData: p.CA.CertPEM}
		if err := SetKubeconfigHosts(cfg.Clusters["c"], hosts); err != nil {
			t.Fatal(err)
		}
		cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
		if provider != nil {
			cfg.AuthInfos["u"].AuthProvider = &clientcmdapi.AuthProviderConfig{Name: AuthProviderName, Config: provider}
		}
		cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
		cfg.CurrentContext = "c"
		if err := pki.WriteKubeconfigFile(path, cfg); err != nil {
			t.Fatal(err)
		}
		return path
	}
	get := func(path string) (string, error) {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return "", err
		}
		c, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return "", err
		}
		defer c.CloseIdleConnections()
		resp, err := c.Get("https://" + dead + "/version")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", nil
		}
		var b strings.Builder
		buf := make([]byte, 256)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return b.String(), nil
	}

	withProvider := filepath.Join(dir, "with.kubeconfig")
	write("with.kubeconfig", map[string]string{AuthProviderKubeconfig: withProvider}, []string{dead, live.host()})
	if out, err := get(withProvider); err != nil || !strings.HasPrefix(out, "live ") {
		t.Errorf("with the provider: %q, %v; want the live server's answer", out, err)
	}
	without := write("without.kubeconfig", nil, []string{dead, live.host()})
	if _, err := get(without); err == nil {
		t.Error("without the provider, plain client-go reached a server; the dead one should refuse")
	}
	for _, tc := range []struct {
		name     string
		provider map[string]string
		want     string
	}{
		{"no kubeconfig in the provider's config", map[string]string{}, `no "kubeconfig"`},
		{"a kubeconfig that does not exist", map[string]string{AuthProviderKubeconfig: filepath.Join(dir, "nope")}, "no such file"},
	} {
		path := write(strings.ReplaceAll(tc.name, " ", "-"), tc.provider, []string{dead, live.host()})
		if _, err := get(path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.want)
		}
	}
}
