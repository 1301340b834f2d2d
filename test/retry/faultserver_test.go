package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

// fault is what the server does with one request.
type fault struct {
	status     int    // answer with this status (0: see below)
	retryAfter string // Retry-After value, "" for none
	location   string // Location, for 3xx
	cut        string // "eof": close the connection; "reset": reset it
	hang       bool   // answer nothing until the client gives up
	notReady   bool   // mark the answer X-Kubernetes-Ready: false (KEP-3028)
}

// faultServer is an HTTP/2 TLS server on 127.0.0.1 that answers requests from
// a script, then succeeds. It counts what it saw.
type faultServer struct {
	srv        *httptest.Server
	mu         sync.Mutex
	script     []fault
	requests   []recorded
	handshakes atomic.Int32
	watch      bool // success answers are a watch event stream
}

type recorded struct {
	at     time.Time
	method string
	body   string
}

type connKey struct{}

func newFaultServer(t *testing.T, ca *pki.Authority, store *pki.Store, script ...fault) *faultServer {
	t.Helper()
	kp, err := store.EnsureCert(ca, pki.CertSpec{Name: "server", CommonName: "server", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"kubernetes.default"}})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	fs := &faultServer{script: script}
	fs.srv = httptest.NewUnstartedServer(http.HandlerFunc(fs.serve))
	fs.srv.EnableHTTP2 = true
	fs.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point of some rows
	fs.srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	// One stream per connection: a response body the client fails to close
	// keeps its stream open, so the next request would need a second
	// connection, which the handshake count shows.
	if err := http2.ConfigureServer(fs.srv.Config, &http2.Server{MaxConcurrentStreams: 1}); err != nil {
		t.Fatal(err)
	}
	fs.srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{pair},
		NextProtos:   []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			fs.handshakes.Add(1)
			return nil, nil
		},
	}
	fs.srv.StartTLS()
	t.Cleanup(fs.srv.Close)
	return fs
}

func (fs *faultServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fs.mu.Lock()
	fs.requests = append(fs.requests, recorded{at: time.Now(), method: r.Method, body: string(body)})
	var f fault
	if len(fs.script) > 0 {
		f, fs.script = fs.script[0], fs.script[1:]
	}
	fs.mu.Unlock()
	switch {
	case f.hang:
		<-r.Context().Done()
		return
	case f.cut != "":
		c := r.Context().Value(connKey{}).(net.Conn)
		if tc, ok := c.(*tls.Conn); ok && f.cut == "reset" {
			if tcp, ok := tc.NetConn().(*net.TCPConn); ok {
				_ = tcp.SetLinger(0) // close with RST
			}
		}
		c.Close()
		return
	case f.status != 0:
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		if f.notReady {
			w.Header().Set("X-Kubernetes-Ready", "false")
		}
		if f.location != "" {
			w.Header().Set("Location", f.location)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d}`, f.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if fs.watch {
		fmt.Fprint(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"}}}`+"\n")
		return
	}
	fmt.Fprint(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"}}`)
}

func (fs *faultServer) seen() []recorded {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]recorded(nil), fs.requests...)
}

func (fs *faultServer) host() string { return fs.srv.Listener.Addr().String() }
