package altsvcclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/internal/testpki"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// apiServer is a TLS HTTP/2 server on its own loopback address that answers
// with its name, and counts requests and their bodies.
type apiServer struct {
	name     string
	srv      *httptest.Server
	requests atomic.Int32
	altSvc   atomic.Value // string to send as Alt-Svc
	bodies   chan string
	onPost   func(s *apiServer, w http.ResponseWriter) bool // true: answered
}

func (s *apiServer) host() string { return s.srv.Listener.Addr().String() }

// startServer serves on ip. Like a real API server's, its certificate names
// its own address and kubernetes.default; onlyServerName leaves the address
// out, which proves that a client reaching it verified kubernetes.default.
func startServer(t testing.TB, p *testpki.TestPKI, ca *pki.Authority, name, ip string, onlyServerName bool) *apiServer {
	t.Helper()
	tlsCfg := issueServing(t, p, ca, name, ip, onlyServerName)
	s := &apiServer{name: name, bodies: make(chan string, 100)}
	s.altSvc.Store("")
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2", http.StatusBadRequest)
			return
		}
		if v := s.altSvc.Load().(string); v != "" {
			w.Header().Set("Alt-Svc", v)
		}
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			s.bodies <- string(b)
			if s.onPost != nil && s.onPost(s, w) {
				return
			}
		}
		fmt.Fprintf(w, "%s host=%s sni=%s", name, r.Host, r.TLS.ServerName)
	}))
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		testci.CannotRun(t, "cannot listen on %s: %v", ip, err)
	}
	s.srv.Listener = l
	s.srv.EnableHTTP2 = true
	s.srv.TLS = tlsCfg
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

// issueServing returns a server TLS configuration with a certificate from ca
// for kubernetes.default and, unless onlyServerName, for ip.
func issueServing(t testing.TB, p *testpki.TestPKI, ca *pki.Authority, name, ip string, onlyServerName bool) *tls.Config {
	t.Helper()
	spec := pki.CertSpec{Name: name, CommonName: name, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{ServerName}}
	if !onlyServerName {
		spec.IPs = []net.IP{net.ParseIP(ip)}
	}
	kp, err := p.Store.EnsureCert(ca, spec)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}}
}

func serverTLS(t testing.TB, p *testpki.TestPKI, ip string) *tls.Config {
	return issueServing(t, p, p.CA, "srv-"+ip, ip, false)
}

func serverTLSNamed(t testing.TB, p *testpki.TestPKI, _ string) *tls.Config {
	return issueServing(t, p, p.CA, "named", "", true)
}

func certPool(t testing.TB, caPEM []byte) *x509.CertPool {
	cp := x509.NewCertPool()
	if !cp.AppendCertsFromPEM(caPEM) {
		t.Fatal("bad CA PEM")
	}
	return cp
}

// client returns an HTTP client built by client-go from a *rest.Config with
// the option enabled, as any client-go user would get it.
func client(t testing.TB, p *testpki.TestPKI, host string, o Options) (*http.Client, *Pool) {
	t.Helper()
	cfg := &rest.Config{Host: "https://" + host, TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM}}
	if o.LocalAddresses == nil {
		o.LocalAddresses = []net.IP{} // every 127.x is local; keep the server's order
	}
	pool, err := Enable(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c, pool
}

func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func post(c *http.Client, url, body string) (string, error) {
	resp, err := c.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// deadAddress returns an address on ip where nothing listens.
func deadAddress(t testing.TB, ip string) string {
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		testci.CannotRun(t, "cannot listen on %s: %v", ip, err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}

func TestRoundTripperLearnsAndFailsOver(t *testing.T) {
	p := testpki.New(t)
	a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
	b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
	c := startServer(t, p, p.CA, "c", "127.0.0.3", true)
	list := fmt.Sprintf(`h2="%s"; ma=60, h2="%s"; ma=60, h2="%s"; ma=60`, a.host(), b.host(), c.host())
	for _, s := range []*apiServer{a, b, c} {
		s.altSvc.Store(list)
	}
	hc, pool := client(t, p, a.host(), Options{})
	got, err := get(hc, "https://"+a.host()+"/api")
	if err != nil || !strings.HasPrefix(got, "a ") {
		t.Fatalf("first GET: %q, %v", got, err)
	}
	if n := len(pool.Hosts()); n != 3 {
		t.Fatalf("learned %d hosts, want 3: %+v", n, pool.Hosts())
	}
	a.srv.CloseClientConnections()
	a.srv.Listener.Close()
	got, err = get(hc, "https://"+a.host()+"/api")
	if err != nil {
		t.Fatalf("GET after the original died: %v", err)
	}
	if want := "b host=kubernetes.default sni=kubernetes.default"; got != want {
		t.Errorf("GET after the original died answered %q, want %q", got, want)
	}
	if pool.Current() != b.host() {
		t.Errorf("Current = %q, want %q", pool.Current(), b.host())
	}
	// Sticks to b: ten more requests, all to b.
	before := b.requests.Load()
	for i := 0; i < 10; i++ {
		if _, err := get(hc, "https://"+a.host()+"/api"); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.requests.Load() - before; n != 10 {
		t.Errorf("b got %d of 10 requests after the switch", n)
	}
	if hs := pool.Hosts(); hs[0].BlockedUntil.IsZero() {
		t.Errorf("the dead original is not blocked: %+v", hs)
	}
}

func TestRoundTripperConfiguredHosts(t *testing.T) {
	p := testpki.New(t)
	b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
	orig := deadAddress(t, "127.0.0.1")
	hc, _ := client(t, p, orig, Options{Hosts: []string{"https://" + b.host()}})
	got, err := get(hc, "https://"+orig+"/api")
	if err != nil || !strings.HasPrefix(got, "b ") {
		t.Fatalf("GET with a configured alternative: %q, %v", got, err)
	}
}

func TestRoundTripperNeverDuplicatesWrites(t *testing.T) {
	p := testpki.New(t)

	t.Run("POST moves when no connection was made, once, body intact", func(t *testing.T) {
		b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
		orig := deadAddress(t, "127.0.0.1")
		hc, _ := client(t, p, orig, Options{Hosts: []string{orig, b.host()}})
		body := strings.Repeat("x", 40000)
		if _, err := post(hc, "https://"+orig+"/api", body); err != nil {
			t.Fatalf("POST: %v", err)
		}
		if n := b.requests.Load(); n != 1 {
			t.Errorf("b got %d requests, want exactly 1", n)
		}
		if got := <-b.bodies; got != body {
			t.Errorf("body arrived with %d bytes, want %d", len(got), len(body))
		}
	})

	t.Run("a request cut off by a dying server: POST not resent, GET resent", func(t *testing.T) {
		a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
		b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
		die := func(s *apiServer, w http.ResponseWriter) bool {
			s.srv.CloseClientConnections()
			return true
		}
		a.onPost = die
		hc, _ := client(t, p, a.host(), Options{Hosts: []string{a.host(), b.host()}})
		// The connection's own error, which client-go's retry reads.
		if _, err := post(hc, "https://"+a.host()+"/api", "once"); err == nil || IsOutcomeUnknown(err) || !ClientGoReads(err) {
			t.Fatalf("POST to a server that died under it: %v; want the connection's own error, as client-go reads it", err)
		}
		if n := b.requests.Load(); n != 0 {
			t.Errorf("the cut-off POST was resent to b (%d requests)", n)
		}
		// The same situation for a GET: a answers, then dies on the next one.
		a2 := startServer(t, p, p.CA, "a2", "127.0.0.3", false)
		b2 := startServer(t, p, p.CA, "b2", "127.0.0.4", true)
		var served atomic.Int32
		a2.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if served.Add(1) > 1 {
				a2.srv.CloseClientConnections()
				return
			}
			fmt.Fprint(w, "a2")
		})
		hc2, _ := client(t, p, a2.host(), Options{Hosts: []string{a2.host(), b2.host()}})
		if got, err := get(hc2, "https://"+a2.host()+"/api"); err != nil || got != "a2" {
			t.Fatalf("first GET: %q %v", got, err)
		}
		got, err := get(hc2, "https://"+a2.host()+"/api")
		if err != nil || !strings.HasPrefix(got, "b2 ") {
			t.Errorf("GET cut off by a dying server: %q, %v; want it resent to b2", got, err)
		}
	})

	t.Run("a GET whose answer is cut off midway is answered by another host", func(t *testing.T) {
		a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
		b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
		a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100000")
			w.WriteHeader(http.StatusOK)
			w.Write([]byte(strings.Repeat("x", 1000)))
			w.(http.Flusher).Flush()
			a.srv.CloseClientConnections()
		})
		hc, _ := client(t, p, a.host(), Options{Hosts: []string{a.host(), b.host()}})
		got, err := get(hc, "https://"+a.host()+"/api")
		if err != nil || !strings.HasPrefix(got, "b ") {
			t.Errorf("GET cut off after the headers: %q, %v; want b's whole answer", got, err)
		}
	})

	t.Run("an opaque body is never moved", func(t *testing.T) {
		b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
		orig := deadAddress(t, "127.0.0.1")
		hc, _ := client(t, p, orig, Options{Hosts: []string{orig, b.host()}})
		req, _ := http.NewRequest(http.MethodPost, "https://"+orig+"/api", io.NopCloser(strings.NewReader("opaque")))
		if _, err := hc.Do(req); err == nil {
			t.Fatal("POST with an opaque body to a dead host succeeded")
		}
		if n := b.requests.Load(); n != 0 {
			t.Errorf("opaque body was sent to b (%d requests)", n)
		}
	})
}

func TestIsStreaming(t *testing.T) {
	for url, want := range map[string]bool{
		"https://h/api/v1/pods":                                false,
		"https://h/api/v1/pods?watch=true":                     true,
		"https://h/api/v1/pods?watch=1&resourceVersion=5":      true,
		"https://h/api/v1/watch/pods":                          true,
		"https://h/api/v1/namespaces/a/pods/p/log?follow=true": true,
		"https://h/api/v1/namespaces/a/pods/p/log":             false,
	} {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if got := isStreaming(req); got != want {
			t.Errorf("isStreaming(%s) = %v", url, got)
		}
	}
}

func TestRoundTripperCertificateAndFallback(t *testing.T) {
	p := testpki.New(t)
	impostor := startServer(t, p, p.Impostor, "impostor", "127.0.0.2", true)
	c := startServer(t, p, p.CA, "c", "127.0.0.3", true)
	orig := deadAddress(t, "127.0.0.1")
	hc, pool := client(t, p, orig, Options{Hosts: []string{impostor.host(), c.host()}, BlockDuration: time.Hour})
	got, err := get(hc, "https://"+orig+"/api")
	if err != nil || !strings.HasPrefix(got, "c ") {
		t.Fatalf("GET: %q, %v; want c after the impostor failed", got, err)
	}
	var impostorState HostState
	for _, h := range pool.Hosts() {
		if h.Host == impostor.host() {
			impostorState = h
		}
	}
	if !impostorState.BlockedForever {
		t.Errorf("impostor not blocked for good: %+v", pool.Hosts())
	}
	// Everything down: the caller gets the original host's own error, also
	// when blocked hosts are tried after it as a last resort.
	c.srv.Close()
	_, err = get(hc, "https://"+orig+"/api")
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), orig) {
		t.Errorf("with every server down: %v; want connection refused from %s", err, orig)
	}
	if n := impostor.requests.Load(); n != 0 {
		t.Errorf("the impostor served %d requests", n)
	}
}

// BenchmarkRoundTrip compares a GET through client-go's own transport with
// the same GET through the round tripper, on the original host and on an
// alternative, against a local TLS HTTP/2 server.
func BenchmarkRoundTrip(b *testing.B) {
	p := testpki.New(b)
	srv := startServer(b, p, p.CA, "a", "127.0.0.1", false)
	alt := startServer(b, p, p.CA, "b", "127.0.0.2", true)
	dead := deadAddress(b, "127.0.0.1")
	plainCfg := &rest.Config{Host: "https://" + srv.host(), TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM}}
	plain, err := rest.HTTPClientFor(plainCfg)
	if err != nil {
		b.Fatal(err)
	}
	withOption, _ := client(b, p, srv.host(), Options{})
	onAlternative, _ := client(b, p, dead, Options{Hosts: []string{alt.host()}})
	// With an alternative to hedge to, every read arms the hedge timer.
	hedgeArmed, _ := client(b, p, srv.host(), Options{Hosts: []string{srv.host(), alt.host()}})
	hedgeOff, _ := client(b, p, srv.host(), Options{Hosts: []string{srv.host(), alt.host()}, HedgeAfter: -1})
	for _, bc := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"client-go", plain, "https://" + srv.host() + "/api"},
		{"original-host", withOption, "https://" + srv.host() + "/api"},
		{"alternative-host", onAlternative, "https://" + dead + "/api"},
		{"two-hosts-hedge-armed", hedgeArmed, "https://" + srv.host() + "/api"},
		{"two-hosts-hedge-off", hedgeOff, "https://" + srv.host() + "/api"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if _, err := get(bc.c, bc.url); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := get(bc.c, bc.url); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
