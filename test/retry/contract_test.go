// Package retry pins client-go's retry contract ("API Retry in Kube") as it
// holds through steadyplane's transports: every row of the decision table in
// docs/client-retry-contract.md is run against a fault-injecting HTTP/2 TLS
// server with plain client-go, with the KEP-3028 option, with the KEP-3037
// round tripper, and with both. A row that differs between them is a bug in
// steadyplane's transports.
package retry

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/steadyplane/steadyplane/internal/testpki"
	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/ifready/ifreadyclient"
)

// variant is one way of building the client.
type variant struct {
	name   string
	enable func(t *testing.T, cfg *rest.Config)
}

var variants = []variant{
	{"client-go", func(*testing.T, *rest.Config) {}},
	{"ifready", func(_ *testing.T, cfg *rest.Config) { ifreadyclient.Enable(cfg) }},
	{"altsvc", enableAltSvc},
	{"ifready+altsvc", func(t *testing.T, cfg *rest.Config) { ifreadyclient.Enable(cfg); enableAltSvc(t, cfg) }},
}

func enableAltSvc(t *testing.T, cfg *rest.Config) {
	if _, err := altsvcclient.Enable(cfg, altsvcclient.Options{}); err != nil {
		t.Fatal(err)
	}
}

// restClient returns a client-go REST client for host, trusting p's CA,
// built with v, whose dials are counted.
func restClient(t *testing.T, p *testpki.TestPKI, host string, v variant, dials *atomic.Int32) *rest.RESTClient {
	t.Helper()
	cfg := &rest.Config{
		Host:            "https://" + host,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM},
		APIPath:         "/api",
		ContentConfig:   rest.ContentConfig{GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: scheme.Codecs.WithoutConversion()},
		QPS:             1000, Burst: 1000,
		Timeout: 30 * time.Second,
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials != nil {
			dials.Add(1)
		}
		return d.DialContext(ctx, network, addr)
	}
	v.enable(t, cfg)
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// op is one client-go call: Do, DoRaw, Watch or Stream with a verb.
type op struct {
	name string
	run  func(ctx context.Context, rc *rest.RESTClient, retries int) error
}

func req(rc *rest.RESTClient, verb string, retries int) *rest.Request {
	r := rc.Verb(verb).Namespace("default").Resource("configmaps").MaxRetries(retries)
	if verb == "POST" {
		r = r.Body([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"}}`))
	}
	return r
}

var (
	doGet    = op{"Do GET", func(ctx context.Context, rc *rest.RESTClient, n int) error { return req(rc, "GET", n).Do(ctx).Error() }}
	doPost   = op{"Do POST", func(ctx context.Context, rc *rest.RESTClient, n int) error { return req(rc, "POST", n).Do(ctx).Error() }}
	doRawGet = op{"DoRaw GET", func(ctx context.Context, rc *rest.RESTClient, n int) error {
		_, err := req(rc, "GET", n).DoRaw(ctx)
		return err
	}}
	watchGet = op{"Watch GET", func(ctx context.Context, rc *rest.RESTClient, n int) error {
		return watchOnce(ctx, req(rc, "GET", n).Param("watch", "true"))
	}}
	watchPost = op{"Watch POST", func(ctx context.Context, rc *rest.RESTClient, n int) error { return watchOnce(ctx, req(rc, "POST", n)) }}
	streamGet = op{"Stream GET", func(ctx context.Context, rc *rest.RESTClient, n int) error {
		s, err := req(rc, "GET", n).Stream(ctx)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, s)
		return s.Close()
	}}
	allOps = []op{doGet, doPost, doRawGet, watchGet, watchPost, streamGet}
)

func watchOnce(ctx context.Context, r *rest.Request) error {
	w, err := r.Watch(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	select {
	case <-w.ResultChan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// row is one line of the decision table: the server's first answer, and for
// each call whether client-go retries it (2 attempts, success) or not (1
// attempt, error).
type row struct {
	name  string
	first fault
	retry map[string]bool // op name -> retried
}

func every(retried bool) map[string]bool {
	m := map[string]bool{}
	for _, o := range allOps {
		m[o.name] = retried
	}
	return m
}

var networkRetries = map[string]bool{"Do GET": true, "Do POST": false, "DoRaw GET": true, "Watch GET": true, "Watch POST": true, "Stream GET": false}

var rows = []row{
	{"503 with Retry-After", fault{status: 503, retryAfter: "0"}, every(true)},
	{"429 with Retry-After", fault{status: 429, retryAfter: "0"}, every(true)},
	{"500 with Retry-After", fault{status: 500, retryAfter: "0"}, every(true)},
	{"504 with Retry-After", fault{status: 504, retryAfter: "0"}, every(true)},
	{"503 without Retry-After", fault{status: 503}, every(false)},
	{"429 without Retry-After", fault{status: 429}, every(false)},
	{"503 with an HTTP-date Retry-After", fault{status: 503, retryAfter: "Fri, 01 Jan 2100 00:00:00 GMT"}, every(false)},
	{"503 with a fractional Retry-After", fault{status: 503, retryAfter: "0.5"}, every(false)},
	{"303 without Location", fault{status: 303, retryAfter: "0"}, every(false)},
	{"404 with Retry-After", fault{status: 404, retryAfter: "0"}, every(false)},
	{"409", fault{status: 409}, every(false)},
	{"connection closed (EOF)", fault{cut: "eof"}, networkRetries},
	{"connection reset", fault{cut: "reset"}, networkRetries},
}

func TestRetryDecisionTable(t *testing.T) {
	if testing.Short() {
		t.Skip("network rows wait client-go's 1s")
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			p := testpki.New(t)
			for _, r := range rows {
				for _, o := range allOps {
					fs := newFaultServer(t, p.CA, p.Store, r.first)
					if strings.HasPrefix(o.name, "Watch") {
						fs.watch = true
					}
					rc := restClient(t, p, fs.host(), v, nil)
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					err := o.run(ctx, rc, 3)
					cancel()
					fs.srv.Close()
					attempts := len(fs.seen())
					want := r.retry[o.name]
					switch {
					case want && (err != nil || attempts != 2):
						t.Errorf("%s / %s: %d attempts, err %v; want a retry (2 attempts) and success", r.name, o.name, attempts, err)
					case !want && (err == nil || attempts != 1):
						t.Errorf("%s / %s: %d attempts, err %v; want no retry (1 attempt) and the error", r.name, o.name, attempts, err)
					}
				}
			}
		})
	}
}

func TestNoRetryWithoutConnection(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := testpki.New(t)
			// Connection refused: nothing listens.
			l, _ := net.Listen("tcp", "127.0.0.1:0")
			dead := l.Addr().String()
			l.Close()
			for _, o := range []op{doGet, watchGet, streamGet} {
				var dials atomic.Int32
				rc := restClient(t, p, dead, v, &dials)
				if err := o.run(context.Background(), rc, 3); err == nil || !strings.Contains(err.Error(), "connection refused") {
					t.Errorf("refused / %s: err %v, want connection refused", o.name, err)
				}
				if n := dials.Load(); n != 1 {
					t.Errorf("refused / %s: %d dials, want 1 (no retry)", o.name, n)
				}
			}
			// x509: the server's certificate is from another CA.
			fs := newFaultServer(t, p.Impostor, p.Store)
			for _, o := range []op{doGet, watchGet, streamGet} {
				before := fs.handshakes.Load()
				rc := restClient(t, p, fs.host(), v, nil)
				if err := o.run(context.Background(), rc, 3); err == nil || !strings.Contains(err.Error(), "x509") {
					t.Errorf("x509 / %s: err %v, want a certificate error", o.name, err)
				}
				if n := fs.handshakes.Load() - before; n != 1 {
					t.Errorf("x509 / %s: %d handshakes, want 1 (no retry)", o.name, n)
				}
			}
		})
	}
}

func TestRetryDetails(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := testpki.New(t)
			retryable := fault{status: 503, retryAfter: "0"}
			script := func(n int) []fault {
				s := make([]fault, n)
				for i := range s {
					s[i] = retryable
				}
				return s
			}

			t.Run("MaxRetries: N retries are N+1 attempts; default 10", func(t *testing.T) {
				for _, tc := range []struct{ retries, want int }{{0, 1}, {3, 4}, {-1, 11}} {
					fs := newFaultServer(t, p.CA, p.Store, script(20)...)
					rc := restClient(t, p, fs.host(), v, nil)
					r := rc.Get().Namespace("default").Resource("configmaps")
					if tc.retries >= 0 {
						r = r.MaxRetries(tc.retries)
					}
					if err := r.Do(context.Background()).Error(); err == nil {
						t.Errorf("MaxRetries(%d): no error after the retries ran out", tc.retries)
					}
					if n := len(fs.seen()); n != tc.want {
						t.Errorf("MaxRetries(%d): %d attempts, want %d", tc.retries, n, tc.want)
					}
				}
			})

			t.Run("a byte body is replayed intact", func(t *testing.T) {
				fs := newFaultServer(t, p.CA, p.Store, retryable)
				rc := restClient(t, p, fs.host(), v, nil)
				body := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"},"data":{"k":"` + strings.Repeat("v", 36000) + `"}}`
				if err := rc.Post().Namespace("default").Resource("configmaps").Body([]byte(body)).Do(context.Background()).Error(); err != nil {
					t.Fatal(err)
				}
				seen := fs.seen()
				if len(seen) != 2 || seen[0].body != body || seen[1].body != body {
					t.Errorf("%d attempts; bodies intact: %v", len(seen), len(seen) == 2 && seen[0].body == body && seen[1].body == body)
				}
			})

			t.Run("an opaque body is never replayed", func(t *testing.T) {
				fs := newFaultServer(t, p.CA, p.Store, retryable)
				rc := restClient(t, p, fs.host(), v, nil)
				err := rc.Post().Namespace("default").Resource("configmaps").Body(io.NopCloser(strings.NewReader(`{}`))).Do(context.Background()).Error()
				if err == nil || len(fs.seen()) != 1 {
					t.Errorf("%d attempts, err %v; want 1 attempt and the 503", len(fs.seen()), err)
				}
			})

			t.Run("the context ends a Retry-After wait", func(t *testing.T) {
				fs := newFaultServer(t, p.CA, p.Store, fault{status: 503, retryAfter: "30"})
				rc := restClient(t, p, fs.host(), v, nil)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				start := time.Now()
				err := rc.Get().Namespace("default").Resource("configmaps").Do(ctx).Error()
				if took := time.Since(start); took > 5*time.Second {
					t.Errorf("returned after %v; the context should have ended the 30s wait", took)
				}
				if err == nil || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err %v, want the context's deadline", err)
				}
			})

			t.Run("the previous attempt's error is wrapped into the final one", func(t *testing.T) {
				fs := newFaultServer(t, p.CA, p.Store, fault{cut: "eof"}, fault{hang: true})
				rc := restClient(t, p, fs.host(), v, nil)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				err := rc.Get().Namespace("default").Resource("configmaps").MaxRetries(1).Do(ctx).Error()
				// The cut connection reads as EOF, or as a reset when the
				// client's HTTP/2 frames were still unread in the server's
				// socket as it closed: either is the first attempt's error.
				if err == nil || !errors.Is(err, context.DeadlineExceeded) ||
					!(strings.Contains(err.Error(), "error from a previous attempt: unexpected EOF") ||
						strings.Contains(err.Error(), "error from a previous attempt: read tcp") && strings.Contains(err.Error(), "connection reset by peer")) {
					t.Errorf("err %v; want the deadline, wrapping the first attempt's EOF or reset", err)
				}
			})

			t.Run("response bodies are closed before a retry", func(t *testing.T) {
				fs := newFaultServer(t, p.CA, p.Store, script(4)...)
				rc := restClient(t, p, fs.host(), v, nil)
				if err := rc.Get().Namespace("default").Resource("configmaps").MaxRetries(5).Do(context.Background()).Error(); err != nil {
					t.Fatal(err)
				}
				// One stream per connection on this server: an unclosed body
				// would have forced a second connection.
				if n := fs.handshakes.Load(); n != 1 {
					t.Errorf("%d connections for 5 attempts, want 1", n)
				}
			})

			t.Run("every attempt passes the rate limiter", func(t *testing.T) {
				fs := newFaultServer(t, p.CA, p.Store, script(2)...)
				cfg := &rest.Config{
					Host: "https://" + fs.host(), TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM}, APIPath: "/api",
					ContentConfig: rest.ContentConfig{GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: scheme.Codecs.WithoutConversion()},
				}
				lim := &countingLimiter{RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter()}
				cfg.RateLimiter = lim
				v.enable(t, cfg)
				rc, err := rest.RESTClientFor(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := rc.Get().Namespace("default").Resource("configmaps").Do(context.Background()).Error(); err != nil {
					t.Fatal(err)
				}
				if n := lim.waits.Load(); n != 3 {
					t.Errorf("rate limiter consulted %d times for 3 attempts", n)
				}
			})
		})
	}
}

// TestBackoffEnvironment checks KUBE_CLIENT_BACKOFF_BASE/DURATION: with them
// set, client-go spaces its retries with exponential URL backoff.
func TestBackoffEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for backoff")
	}
	t.Setenv("KUBE_CLIENT_BACKOFF_BASE", "1")
	t.Setenv("KUBE_CLIENT_BACKOFF_DURATION", "60")
	for _, v := range []variant{variants[0], variants[3]} {
		t.Run(v.name, func(t *testing.T) {
			p := testpki.New(t)
			fs := newFaultServer(t, p.CA, p.Store, fault{status: 503, retryAfter: "0"}, fault{status: 503, retryAfter: "0"})
			rc := restClient(t, p, fs.host(), v, nil)
			if err := rc.Get().Namespace("default").Resource("configmaps").Do(context.Background()).Error(); err != nil {
				t.Fatal(err)
			}
			seen := fs.seen()
			if len(seen) != 3 {
				t.Fatalf("%d attempts, want 3", len(seen))
			}
			d1, d2 := seen[1].at.Sub(seen[0].at), seen[2].at.Sub(seen[1].at)
			if d1 < 900*time.Millisecond || d2 < 1900*time.Millisecond {
				t.Errorf("gaps %v and %v; want at least 1s then 2s of backoff", d1, d2)
			}
		})
	}
}

type countingLimiter struct {
	flowcontrol.RateLimiter
	waits atomic.Int32
}

func (l *countingLimiter) Wait(ctx context.Context) error {
	l.waits.Add(1)
	return l.RateLimiter.Wait(ctx)
}
