package altsvcclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	certutil "k8s.io/client-go/util/cert"

	"github.com/steadyplane/steadyplane/internal/testpki"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// TestClientCertificateRotationFailsNoRequest: a client whose kubeconfig
// names its certificate's files, renewed while a request is in flight.
// client-go alone closes every connection when it sees the new files,
// failing that request; through the alternative-services transports the
// request finishes, and the next one presents the new certificate.
func TestClientCertificateRotationFailsNoRequest(t *testing.T) {
	old := transport.CertCallbackRefreshDuration
	transport.CertCallbackRefreshDuration = 100 * time.Millisecond
	t.Cleanup(func() { transport.CertCallbackRefreshDuration = old })

	p := testpki.New(t)
	now := time.Now()
	p.Store.Now = func() time.Time { return now }
	p.Store.Validity = time.Hour
	spec := pki.CertSpec{Name: "client", CommonName: "client", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	first, err := p.Store.EnsureCert(p.CA, spec)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := p.Store.EnsureCert(p.CA, pki.CertSpec{Name: "server", CommonName: "server", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var seen []string // the serial of each request's client certificate
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.TLS.PeerCertificates[0].SerialNumber.String())
		mu.Unlock()
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	pair, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAnyClientCert}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM, CertFile: first.CertPath, KeyFile: first.KeyPath}}
	if _, err := NewRegistry(Options{}).Enable(cfg, nil); err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: rt, Timeout: 20 * time.Second}
	get := func(ctx context.Context, path string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	if err := get(context.Background(), "/"); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() { slow <- get(context.Background(), "/slow") }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	now = now.Add(50 * time.Minute) // past two thirds: issued again
	second, err := p.Store.EnsureCert(p.CA, spec)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // client-go reads the files again and rotates
	if err := get(context.Background(), "/"); err != nil {
		t.Fatalf("a request after the renewal: %v", err)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Errorf("the request in flight during the renewal failed: %v", err)
	}
	newSerial := parseSerial(t, second.CertPEM)
	mu.Lock()
	defer mu.Unlock()
	if last := seen[len(seen)-1]; last != newSerial {
		t.Errorf("the request after the renewal presented certificate %s, want the renewed one %s (all: %v)", last, newSerial, seen)
	}
}

func parseSerial(t *testing.T, certPEM []byte) string {
	t.Helper()
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0].SerialNumber.String()
}
