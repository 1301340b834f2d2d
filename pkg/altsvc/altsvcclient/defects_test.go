package altsvcclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	genericfilters "k8s.io/apiserver/pkg/server/filters"

	"k8s.io/client-go/transport/spdy"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/steadyplane/steadyplane/pkg/ifready"

	"github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/util/httpstream"
	apispdy "k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/rest"
	clientspdy "k8s.io/client-go/transport/spdy"
	clientwebsocket "k8s.io/client-go/transport/websocket"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/internal/testpki"
)

// Each test here pins a defect found in review of the first version; each
// failed before its fix.

func TestEachClusterHasItsOwnPool(t *testing.T) {
	p := testpki.New(t)
	// Cluster one: a (configured) and b (learned). Cluster two: c, with the
	// same CA, and d, which it does not advertise.
	a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
	b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
	c := startServer(t, p, p.CA, "c", "127.0.0.3", false)
	a.altSvc.Store(fmt.Sprintf(`h2="%s", h2="%s"`, a.host(), b.host()))
	cfg := &rest.Config{Host: "https://" + a.host(), TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM}}
	pool, err := Enable(cfg, Options{LocalAddresses: []net.IP{}})
	if err != nil {
		t.Fatal(err)
	}
	one, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := get(one, "https://"+a.host()+"/api"); err != nil {
		t.Fatal(err)
	}
	if n := len(pool.Hosts()); n != 2 {
		t.Fatalf("cluster one knows %d hosts, want 2", n)
	}
	// A copy pointed at cluster two, whose server is then lost for a moment.
	other := rest.CopyConfig(cfg)
	other.Host = "https://" + c.host()
	two, err := rest.HTTPClientFor(other)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := get(two, "https://"+c.host()+"/api"); err != nil || !strings.HasPrefix(got, "c ") {
		t.Fatalf("cluster two: %q, %v", got, err)
	}
	c.srv.CloseClientConnections()
	c.srv.Listener.Close()
	before := b.requests.Load()
	if got, err := get(two, "https://"+c.host()+"/api"); err == nil {
		t.Errorf("cluster two's request was answered by another cluster: %q", got)
	}
	if n := b.requests.Load() - before; n != 0 {
		t.Errorf("cluster one's learned host b got %d requests meant for cluster two", n)
	}
}

func TestUnknownErrorWhileConnectingMovesTheRequest(t *testing.T) {
	p := testpki.New(t)
	b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
	// A host that speaks plain HTTP: the TLS handshake fails with a
	// tls.RecordHeaderError, which no list of network errors names.
	plain := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain.Listener = l
	plain.Start()
	defer plain.Close()
	orig := plain.Listener.Addr().String()
	hc, pool := client(t, p, orig, Options{Hosts: []string{orig, b.host()}})
	got, err := post(hc, "https://"+orig+"/api", "once")
	if err != nil || !strings.HasPrefix(got, "b ") {
		t.Fatalf("POST with a plain-HTTP original: %q, %v; want it moved to b", got, err)
	}
	if pool.Current() != b.host() {
		t.Errorf("Current = %s", pool.Current())
	}
}

func TestNoLearningFromProxiedAnswers(t *testing.T) {
	p := testpki.New(t)
	a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
	evil := startServer(t, p, p.CA, "evil", "127.0.0.2", true)
	a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/proxy") {
			// What a pod behind pods/x/proxy would send, if the server let it.
			w.Header().Set("Alt-Svc", fmt.Sprintf(`h2="%s"; ma=3600`, evil.host()))
		}
		fmt.Fprint(w, "a")
	})
	hc, pool := client(t, p, a.host(), Options{})
	for _, path := range []string{"/api/v1/namespaces/default/pods/web/proxy/", "/api/v1/nodes/n/proxy/", "/api/v1/namespaces/default/services/s:80/proxy/x"} {
		if _, err := get(hc, "https://"+a.host()+path); err != nil {
			t.Fatal(err)
		}
	}
	if hs := pool.Hosts(); len(hs) != 0 {
		t.Errorf("learned from a proxied answer: %+v", hs)
	}
}

func TestTLSSettingsAreHonoured(t *testing.T) {
	p := testpki.New(t)
	t.Run("an insecure config is refused", func(t *testing.T) {
		cfg := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
		_, err := Enable(cfg, Options{})
		if err == nil || !strings.Contains(err.Error(), "insecure-skip-tls-verify") {
			t.Errorf("Enable(insecure) = %v, want a refusal naming insecure-skip-tls-verify", err)
		}
		if cfg.WrapTransport != nil {
			t.Error("a refused config was changed")
		}
	})
	t.Run("NextProtos without h2 keeps HTTP/1.1", func(t *testing.T) {
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.Proto) }))
		s.EnableHTTP2 = true
		s.TLS = serverTLS(t, p, "127.0.0.1")
		s.StartTLS()
		defer s.Close()
		host := s.Listener.Addr().String()
		for _, tc := range []struct {
			name, env string
			protos    []string
			want      string
		}{
			{"default", "", nil, "HTTP/2.0"},
			{"http/1.1 only", "", []string{"http/1.1"}, "HTTP/1.1"},
			{"DISABLE_HTTP2", "1", nil, "HTTP/1.1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Setenv("DISABLE_HTTP2", tc.env)
				cfg := &rest.Config{Host: "https://" + host, TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM, NextProtos: tc.protos}}
				if _, err := Enable(cfg, Options{LocalAddresses: []net.IP{}}); err != nil {
					t.Fatal(err)
				}
				hc, err := rest.HTTPClientFor(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer hc.CloseIdleConnections()
				if got, err := get(hc, "https://"+host+"/api"); err != nil || got != tc.want {
					t.Errorf("spoke %q (%v), want %s", got, err, tc.want)
				}
			})
		}
	})
	t.Run("follows client-go's transport when its CA is reloaded", func(t *testing.T) {
		a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
		wrong := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certPool(t, p.Impostor.CertPEM)}}
		right := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certPool(t, p.CA.CertPEM)}}
		h := &caHolder{}
		h.current.Store(wrong)
		cfg := &rest.Config{Host: "https://" + a.host(), Transport: h}
		if _, err := Enable(cfg, Options{LocalAddresses: []net.IP{}, CARefreshInterval: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := get(hc, "https://"+a.host()+"/api"); err == nil {
			t.Fatal("GET trusting the wrong CA succeeded")
		}
		h.current.Store(right) // what client-go does when the CA file changes
		time.Sleep(5 * time.Millisecond)
		if got, err := get(hc, "https://"+a.host()+"/api"); err != nil || !strings.HasPrefix(got, "a ") {
			t.Errorf("GET after the CA reload: %q, %v", got, err)
		}
		if n := h.refreshes.Load(); n == 0 {
			t.Error("client-go's holder was never given the chance to re-read its CA")
		}
		if n := h.sent.Load(); n != 0 {
			t.Errorf("%d real requests went through client-go's transport instead of the copies", n)
		}
	})
}

// caHolder stands in for client-go's CA-reloading transport holder: it hands
// out its current transport and counts the refresh calls it gets.
type caHolder struct {
	current   atomic.Pointer[http.Transport]
	refreshes atomic.Int32
	sent      atomic.Int32
}

func (h *caHolder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Context().Err() != nil {
		h.refreshes.Add(1)
	} else {
		h.sent.Add(1)
	}
	return h.current.Load().RoundTrip(req)
}

func (h *caHolder) WrappedRoundTripper() http.RoundTripper { return h.current.Load() }

func TestBrokenWatchCountsAgainstItsHost(t *testing.T) {
	p := testpki.New(t)
	a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
	b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
	a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			w.WriteHeader(http.StatusOK)
			fmt.Fprintln(w, `{"type":"ADDED"}`)
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
			a.srv.CloseClientConnections() // the server dies mid-watch
			return
		}
		fmt.Fprint(w, "a")
	})
	hc, pool := client(t, p, a.host(), Options{Hosts: []string{a.host(), b.host()}})
	resp, err := hc.Get("https://" + a.host() + "/api/v1/pods?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatal("the broken watch ended cleanly")
	}
	// The re-watch goes to b at once, not to a again.
	before := a.requests.Load()
	resp, err = hc.Get("https://" + a.host() + "/api/v1/pods?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if pool.Current() != b.host() || a.requests.Load() != before {
		t.Errorf("re-watch went to %s (a got %d more); want b", pool.Current(), a.requests.Load()-before)
	}
}

func TestNotReadyRefusalMovesAnyVerb(t *testing.T) {
	p := testpki.New(t)
	a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
	b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
	refuse := func(s *apiServer) {
		s.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.requests.Add(1)
			io.Copy(io.Discard, r.Body)
			w.Header().Set("X-Kubernetes-Ready", "false")
			w.Header().Set("Retry-After", "1")
			http.Error(w, "initializing", http.StatusServiceUnavailable)
		})
	}
	refuse(a)
	hc, _ := client(t, p, a.host(), Options{Hosts: []string{a.host(), b.host()}})
	got, err := post(hc, "https://"+a.host()+"/api", "create")
	if err != nil || !strings.HasPrefix(got, "b ") {
		t.Fatalf("POST refused as not ready: %q, %v; want it answered by b", got, err)
	}
	if n := b.requests.Load(); n != 1 {
		t.Errorf("b got %d requests, want 1", n)
	}
	// Every host refusing: the refusal reaches the caller, for client-go's
	// retry to honour its Retry-After.
	refuse(b)
	time.Sleep(1100 * time.Millisecond) // a's not-ready block ends
	resp, err := hc.Post("https://"+a.host()+"/api", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "initializing") {
		t.Errorf("with every host refusing: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

// upgradeSetup starts s on 127.0.0.2 with a certificate for
// kubernetes.default only, and returns a config enabled for an original
// host where nothing listens, with s as its alternative.
func upgradeSetup(t *testing.T, p *testpki.TestPKI, s *httptest.Server) (*rest.Config, string) {
	t.Helper()
	startAlternative(t, p, s)
	orig := deadAddress(t, "127.0.0.1")
	cfg := &rest.Config{Host: "https://" + orig, TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM}}
	if _, err := Enable(cfg, Options{Hosts: []string{orig, s.Listener.Addr().String()}, LocalAddresses: []net.IP{}}); err != nil {
		t.Fatal(err)
	}
	return cfg, orig
}

func TestUpgradeConnectStepFailsOver(t *testing.T) {
	p := testpki.New(t)
	var upgrades atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up := websocket.Upgrader{Subprotocols: []string{"v5.channel.k8s.io"}}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		upgrades.Add(1)
		c.WriteMessage(websocket.BinaryMessage, []byte("hello from b"))
		c.Close()
	}))
	cfg, orig := upgradeSetup(t, p, s)
	rt, holder, err := clientwebsocket.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+orig+"/api/v1/namespaces/default/pods/p/exec?command=true", nil)
	req.Header["Sec-Websocket-Protocol"] = []string{"v5.channel.k8s.io"}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("exec connect with the original down: %v", err)
	}
	resp.Body.Close()
	_, msg, err := holder.Connection().ReadMessage()
	if err != nil || string(msg) != "hello from b" {
		t.Errorf("read %q, %v", msg, err)
	}
	if n := upgrades.Load(); n != 1 {
		t.Errorf("%d upgrades reached the alternative, want 1", n)
	}
}

// TestWatchResumesOnAnotherHost: a JSON watch (kubectl get -w) whose server
// dies mid-stream goes on on another host from the last event: the reader
// sees every event once, in order, and no torn event.
func TestWatchResumesOnAnotherHost(t *testing.T) {
	p := testpki.New(t)
	a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
	b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
	event := func(rv int) string {
		return fmt.Sprintf(`{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"cm%d","resourceVersion":"%d"}}}`+"\n", rv, rv)
	}
	a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for rv := 1; rv <= 3; rv++ {
			io.WriteString(w, event(rv))
		}
		io.WriteString(w, event(4)[:20]) // torn by the crash
		w.(http.Flusher).Flush()
		time.Sleep(50 * time.Millisecond)
		a.srv.CloseClientConnections()
	})
	var mu sync.Mutex
	var resumedFrom []string
	b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from := r.URL.Query().Get("resourceVersion")
		mu.Lock()
		resumedFrom = append(resumedFrom, from)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		n, _ := strconv.Atoi(from)
		for rv := n + 1; rv <= 5; rv++ {
			io.WriteString(w, event(rv))
		}
	})
	hc, pool := client(t, p, a.host(), Options{Hosts: []string{a.host(), b.host()}})
	resp, err := hc.Get("https://" + a.host() + "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the watch: %v (got %q)", err, got)
	}
	want := event(1) + event(2) + event(3) + event(4) + event(5)
	if string(got) != want {
		t.Errorf("watch stream:\n%s\nwant:\n%s", got, want)
	}
	// From 3 after the crash; from 5 after b ended its watch cleanly (as a
	// server that shuts down does), which b then ended at once: the end.
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(resumedFrom, []string{"3", "5"}) {
		t.Errorf("resumed from resourceVersions %q, want 3 then 5", resumedFrom)
	}
	if pool.Current() != b.host() {
		t.Errorf("Current = %s", pool.Current())
	}
}

// TestWatchEndedByItsServer: a JSON watch that its server ends cleanly (an
// API server shutting down ends its watches so) goes on from its last
// event, unless it asked for an end (timeoutSeconds) or the server ended it
// with an ERROR event, which it would send again.
func TestWatchEndedByItsServer(t *testing.T) {
	p := testpki.New(t)
	a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
	event := func(rv int) string {
		return fmt.Sprintf(`{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"cm%d","resourceVersion":"%d"}}}`+"\n", rv, rv)
	}
	const tooNew = `{"type":"ERROR","object":{"kind":"Status","status":"Failure","reason":"Timeout","code":504}}` + "\n"
	var watches atomic.Int32
	a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		watches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		// Two events a watch, up to the fourth: then it ends at once.
		n, _ := strconv.Atoi(r.URL.Query().Get("resourceVersion"))
		if n >= 100 {
			// The watch cache's answer to a resourceVersion it cannot serve:
			// 200, one ERROR event, the end.
			io.WriteString(w, tooNew)
			return
		}
		for rv := n + 1; rv <= min(n+2, 4); rv++ {
			io.WriteString(w, event(rv))
		}
	})
	for _, c := range []struct {
		query   string
		want    string
		watches int32
	}{
		{"watch=true&resourceVersion=0", event(1) + event(2) + event(3) + event(4), 3},
		{"watch=true&resourceVersion=0&timeoutSeconds=300", event(1) + event(2), 1},
		{"watch=true&resourceVersion=100", tooNew, 1},
	} {
		watches.Store(0)
		hc, _ := client(t, p, a.host(), Options{Hosts: []string{a.host()}})
		resp, err := hc.Get("https://" + a.host() + "/api/v1/namespaces/default/configmaps?" + c.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(got) != c.want || watches.Load() != c.watches {
			t.Errorf("%s: %d watches, %v, stream:\n%s\nwant:\n%s", c.query, watches.Load(), err, got, c.want)
		}
	}
}

func TestMayResumeWatch(t *testing.T) {
	for _, tt := range []struct {
		url, method, contentType string
		status                   int
		want                     bool
	}{
		{"https://h/api/v1/pods?watch=true", "GET", "application/json", 200, true},
		{"https://h/api/v1/pods?watch=1&resourceVersion=5", "GET", "application/json;stream=watch", 200, true},
		{"https://h/api/v1/pods?watch=true", "GET", "application/vnd.kubernetes.protobuf;stream=watch", 200, false},
		{"https://h/api/v1/pods?watch=true&sendInitialEvents=true", "GET", "application/json", 200, false},
		{"https://h/api/v1/pods", "GET", "application/json", 200, false},
		{"https://h/api/v1/pods?watch=true", "GET", "application/json", 410, false},
		{"https://h/api/v1/pods?watch=true", "POST", "application/json", 200, false},
	} {
		req, _ := http.NewRequest(tt.method, tt.url, nil)
		resp := &http.Response{StatusCode: tt.status, Header: http.Header{"Content-Type": {tt.contentType}}}
		if got := MayResumeWatch(req, resp); got != tt.want {
			t.Errorf("MayResumeWatch(%s %s, %d %s) = %v", tt.method, tt.url, tt.status, tt.contentType, got)
		}
	}
}

// TestSPDYConnectStepFailsOver: the SPDY path of exec and port-forward
// (client-go's spdy.RoundTripperFor) moves its dial to another host too.
func TestSPDYConnectStepFailsOver(t *testing.T) {
	p := testpki.New(t)
	var upgrades atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := httpstream.Handshake(r, w, []string{"portforward.k8s.io"}); err != nil {
			return
		}
		conn := apispdy.NewResponseUpgrader().UpgradeResponse(w, r, func(httpstream.Stream, <-chan struct{}) error { return nil })
		if conn != nil {
			upgrades.Add(1)
			<-conn.CloseChan()
		}
	}))
	cfg, orig := upgradeSetup(t, p, s)
	rt, upgrader, err := clientspdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("https://" + orig + "/api/v1/namespaces/default/pods/p/portforward")
	dialer := clientspdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	conn, proto, err := dialer.Dial("portforward.k8s.io")
	if err != nil {
		t.Fatalf("port-forward connect with the original down: %v", err)
	}
	defer conn.Close()
	// The client has its 101 before the server's handler returns from the
	// upgrade: wait for the count.
	for i := 0; i < 200 && upgrades.Load() == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if proto != "portforward.k8s.io" || upgrades.Load() != 1 {
		t.Errorf("protocol %q, %d upgrades at the alternative; want portforward.k8s.io and 1", proto, upgrades.Load())
	}
}

// TestUpgradeMovesOnFromARefusal: the connect step of an exec goes through
// the same attempt loop as any request, so a server that refuses it as not
// yet initialized (KEP-3028) is left for the next one, and both attempts
// are counted. (client-go's SPDY round tripper hands back the refusal as
// an answer; its websocket one turns it into an error that says nothing of
// the header.)
func TestUpgradeMovesOnFromARefusal(t *testing.T) {
	p := testpki.New(t)
	refusing := startServer(t, p, p.CA, "a", "127.0.0.1", false)
	refusing.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ifready.HeaderReady, "false")
		w.Header().Set("Retry-After", "1")
		http.Error(w, "not yet initialized", http.StatusServiceUnavailable)
	})
	var reached atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		http.Error(w, "b answers", http.StatusBadRequest)
	}))
	orig, alt := refusing.host(), startAlternative(t, p, s)
	cfg := &rest.Config{Host: "https://" + orig, TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM}}
	pool, err := Enable(cfg, Options{Hosts: []string{orig, alt}, LocalAddresses: []net.IP{}})
	if err != nil {
		t.Fatal(err)
	}
	refusedBefore := testutil.ToFloat64(metrics.requests.WithLabelValues(orig, NotReadyFailure.String()))
	okBefore := testutil.ToFloat64(metrics.requests.WithLabelValues(alt, "ok"))
	rt, _, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+orig+"/api/v1/namespaces/default/pods/p/exec?command=true", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("exec connect with the original refusing: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "b answers") {
		t.Errorf("answer %d %q, want the alternative's", resp.StatusCode, body)
	}
	if n := reached.Load(); n != 1 {
		t.Errorf("%d connects reached the alternative, want 1", n)
	}
	if pool.Current() != alt {
		t.Errorf("Current = %q, want %q", pool.Current(), alt)
	}
	if d := testutil.ToFloat64(metrics.requests.WithLabelValues(orig, NotReadyFailure.String())) - refusedBefore; d != 1 {
		t.Errorf("refusals counted for the original: %v, want 1", d)
	}
	if d := testutil.ToFloat64(metrics.requests.WithLabelValues(alt, "ok")) - okBefore; d != 1 {
		t.Errorf("answers counted for the alternative: %v, want 1", d)
	}
}

// startAlternative starts s on 127.0.0.2 with a certificate for
// kubernetes.default only, as an alternative API server, and returns its
// address.
func startAlternative(t *testing.T, p *testpki.TestPKI, s *httptest.Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		testci.CannotRun(t, "cannot listen on 127.0.0.2: %v", err)
	}
	s.Listener = l
	s.TLS = serverTLSNamed(t, p, ServerName)
	s.StartTLS()
	t.Cleanup(s.Close)
	return l.Addr().String()
}

// TestShutdownRefusalGoesOn: a server that shuts down refuses new requests
// with k8s.io/apiserver's own 429 (Retry-After: 5); they were not processed,
// so a write goes on to the next server at once, exactly once, instead of
// client-go waiting 5s for the same server. An overloaded server's 429 is
// the caller's.
func TestShutdownRefusalGoesOn(t *testing.T) {
	p := testpki.New(t)
	a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
	b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
	shuttingDown := make(chan struct{})
	close(shuttingDown)
	a.srv.Config.Handler = genericfilters.WithRetryAfter(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a processed %s %s while shutting down", r.Method, r.URL.Path)
	}), shuttingDown)
	hc, pool := client(t, p, a.host(), Options{Hosts: []string{a.host(), b.host()}})
	begun := time.Now()
	resp, err := hc.Post("https://"+a.host()+"/api/v1/namespaces/default/configmaps", "application/json", strings.NewReader(`{"kind":"ConfigMap"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "b ") || time.Since(begun) > 2*time.Second {
		t.Errorf("a write refused by a shutting-down server: %d %q after %v; want b's answer at once", resp.StatusCode, body, time.Since(begun))
	}
	if n := len(b.bodies); n != 1 {
		t.Errorf("b got %d writes, want 1", n)
	}
	if pool.Current() != b.host() {
		t.Errorf("Current = %s", pool.Current())
	}

	// Overloaded: the 429 reaches the caller, with its body whole.
	b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
	})
	resp, err = hc.Get("https://" + a.host() + "/api/v1/namespaces") // b, the current server
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || string(body) != "Too many requests, please try again later.\n" {
		t.Errorf("overload: %d %q; want the 429 and its whole body", resp.StatusCode, body)
	}
}
