package join

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

func testCluster(t *testing.T) *pki.Cluster {
	t.Helper()
	c, err := (&pki.Store{Dir: filepath.Join(t.TempDir(), "pki")}).EnsureCluster(pki.ClusterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseToken(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, in, wantErr string
		want              Token
	}{
		{name: "as up writes it, with its newline", in: "SP1" + hash + "::abcdef.0123456789abcdef\n",
			want: Token{CAHash: "sha256:" + hash, ID: "abcdef", Secret: "0123456789abcdef"}},
		{name: "upper-case hash", in: "SP1" + strings.ToUpper(hash) + "::abcdef.0123456789abcdef",
			want: Token{CAHash: "sha256:" + hash, ID: "abcdef", Secret: "0123456789abcdef"}},
		{name: "a bare bootstrap token", in: "abcdef.0123456789abcdef", wantErr: `does not start with "SP1"`},
		{name: "k3s's format", in: "K10" + hash + "::server:secret", wantErr: `does not start with "SP1"`},
		{name: "no separator", in: "SP1" + hash + "abcdef.0123456789abcdef", wantErr: `no "::"`},
		{name: "short hash", in: "SP1abcd::abcdef.0123456789abcdef", wantErr: "64 hex digits"},
		{name: "hash not hex", in: "SP1" + strings.Repeat("zz", 32) + "::abcdef.0123456789abcdef", wantErr: "64 hex digits"},
		{name: "secret too short", in: "SP1" + hash + "::abcdef.0123", wantErr: "not a bootstrap token"},
		{name: "upper-case secret", in: "SP1" + hash + "::abcdef.0123456789ABCDEF", wantErr: "not a bootstrap token"},
		{name: "empty", in: "", wantErr: "does not start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseToken(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "0123456789") {
					t.Errorf("the error repeats the secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if again, err := ParseToken(got.String()); err != nil || again != got {
				t.Errorf("String() does not parse back: %q: %+v, %v", got.String(), again, err)
			}
		})
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add("SP1" + strings.Repeat("ab", 32) + "::abcdef.0123456789abcdef")
	f.Add("SP1::")
	f.Add("SP1" + strings.Repeat("0", 64) + "::......")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			return
		}
		if again, err := ParseToken(tok.String()); err != nil || again != tok {
			t.Fatalf("%q parsed to %+v, which does not round-trip: %+v, %v", s, tok, again, err)
		}
	})
}

func TestNewTokenPinsTheCA(t *testing.T) {
	c, other := testCluster(t), testCluster(t)
	tok, err := NewToken(c.CA.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.CheckCA(c.CA.Cert); err != nil {
		t.Errorf("own CA: %v", err)
	}
	if err := tok.CheckCA(other.CA.Cert); err == nil {
		t.Error("another cluster's CA passed the pin")
	}
	if tok.User() != "system:bootstrap:"+tok.ID {
		t.Errorf("User() = %q", tok.User())
	}
}

func TestSealOpen(t *testing.T) {
	c := testCluster(t)
	tok, _ := NewToken(c.CA.Cert)
	b := &Bundle{CACert: c.CA.CertPEM, CAKey: []byte("k"), EtcdCACert: c.EtcdCA.CertPEM, EtcdCAKey: []byte("e"), KubeletCACert: c.KubeletCA.CertPEM, KubeletCAKey: []byte("l"), ServiceAccountKey: []byte("s"),
		ServiceCIDR: "10.96.0.0/16", ClusterCIDR: "10.244.0.0/16", ClusterDomain: "cluster.local", NodeCIDRMaskSize: 24, EtcdClientPort: 2379}
	sealed, err := Seal(b, tok)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), "BEGIN CERTIFICATE") || strings.Contains(string(sealed), "10.96.0.0") {
		t.Fatal("the sealed bundle shows its content")
	}
	got, err := Open(sealed, tok)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClusterCIDR != b.ClusterCIDR || string(got.CAKey) != "k" || got.EtcdClientPort != 2379 {
		t.Errorf("opened %+v", got)
	}
	other := tok
	other.Secret = "zzzzzzzzzzzzzzzz"
	if _, err := Open(sealed, other); !errors.Is(err, ErrBundleSeal) {
		t.Errorf("another secret: err = %v, want ErrBundleSeal", err)
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := Open(sealed, tok); !errors.Is(err, ErrBundleSeal) {
		t.Errorf("damaged: err = %v, want ErrBundleSeal", err)
	}
	if _, err := Open(nil, tok); err == nil {
		t.Error("empty bundle opened")
	}
	incomplete, _ := Seal(&Bundle{CACert: c.CA.CertPEM}, tok)
	if _, err := Open(incomplete, tok); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("incomplete bundle: err = %v", err)
	}
}

// clusterInfoServer serves kube-public/cluster-info with ca's kubeconfig
// over TLS with the serving key pair kp.
func clusterInfoServer(t *testing.T, caPEM []byte, kp *pki.KeyPair) *httptest.Server {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters[""] = &clientcmdapi.Cluster{Server: "https://x", CertificateAuthorityData: caPEM}
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(corev1.ConfigMap{Data: map[string]string{"kubeconfig": string(data)}})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			t.Errorf("discovery sent credentials: %q", r.Header.Get("Authorization"))
		}
		if r.URL.Path != "/api/v1/namespaces/kube-public/configmaps/cluster-info" {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	}))
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener, _ = net.Listen("tcp", "127.0.0.1:0")
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestDiscoverCA(t *testing.T) {
	c, other := testCluster(t), testCluster(t)
	tok, _ := NewToken(c.CA.Cert)
	ctx := context.Background()

	t.Run("the pinned CA, which signed the server's certificate", func(t *testing.T) {
		srv := clusterInfoServer(t, c.CA.CertPEM, c.APIServer)
		got, err := Discover(ctx, srv.URL, tok)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.CA) != string(c.CA.CertPEM) {
			t.Error("returned another CA")
		}
		if want := strings.TrimPrefix(srv.URL, "https://"); len(got.Servers) != 1 || got.Servers[0] != want {
			t.Errorf("servers %v, want the one asked (%s) when cluster-info lists none", got.Servers, want)
		}
	})
	t.Run("a server of another cluster", func(t *testing.T) {
		srv := clusterInfoServer(t, other.CA.CertPEM, other.APIServer)
		if _, err := Discover(ctx, srv.URL, tok); err == nil || !strings.Contains(err.Error(), "not the one the join token pins") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("the pinned CA beside one of the server's own, which signed its certificate", func(t *testing.T) {
		// A man in the middle relays the (public) cluster CA and adds his
		// own: only the pinned one may be trusted.
		bundle := append(append([]byte{}, c.CA.CertPEM...), other.CA.CertPEM...)
		srv := clusterInfoServer(t, bundle, other.APIServer)
		if _, err := Discover(ctx, srv.URL, tok); err == nil || !strings.Contains(err.Error(), "not from the pinned CA") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("only the pinned CA is returned", func(t *testing.T) {
		bundle := append(append([]byte{}, c.CA.CertPEM...), other.CA.CertPEM...)
		srv := clusterInfoServer(t, bundle, c.APIServer)
		got, err := Discover(ctx, srv.URL, tok)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.CA) != string(c.CA.CertPEM) {
			t.Errorf("returned CAs:\n%s", got.CA)
		}
	})
	t.Run("the right CA relayed by a server that does not hold a certificate from it", func(t *testing.T) {
		srv := clusterInfoServer(t, c.CA.CertPEM, other.APIServer)
		if _, err := Discover(ctx, srv.URL, tok); err == nil || !strings.Contains(err.Error(), "not from the pinned CA") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("not https", func(t *testing.T) {
		if _, err := Discover(ctx, "http://127.0.0.1:1", tok); err == nil || !strings.Contains(err.Error(), "https URL") {
			t.Fatalf("err = %v", err)
		}
	})
}
