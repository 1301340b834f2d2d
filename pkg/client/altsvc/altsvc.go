// Package altsvc is the client half of KEP-3037 "client-go alternative
// services": an option on *rest.Config that lets any client-go user survive the
// loss of the API server it was configured with, without a load balancer.
//
//	cfg, _ := clientcmd.BuildConfigFromFlags("", kubeconfig)
//	pool, err := altsvc.Enable(cfg, altsvc.Options{})
//	cs := kubernetes.NewForConfigOrDie(cfg)
//
// The client learns the other API servers from the Alt-Svc header that
// steadyplane's API servers send to authenticated HTTP/2 clients (or from
// Options.Hosts), and sends each request to one of them, chosen by Order. A
// host that cannot be reached is blocked for a while, one whose certificate
// does not verify is blocked for good. A request moves to another host only if
// that cannot duplicate it (MayResend). The round tripper never waits and
// never looks at status codes: client-go's own retry (429/5xx with
// Retry-After) works above it unchanged.
package altsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	wire "github.com/steadyplane/steadyplane/pkg/altsvc"
)

// ServerName is the name an alternative API server is addressed by: the TLS
// server name and the HTTP/2 :authority. Every API server's serving
// certificate carries it (it is the in-cluster name of the kubernetes service).
const ServerName = "kubernetes.default"

// Options configure the alternative-services round tripper.
type Options struct {
	// Hosts are alternative API servers known in advance, as host:port or
	// URLs. Hosts learned from Alt-Svc replace them while they are fresh.
	Hosts []string
	// BlockDuration is how long a host that failed at the network level is
	// left out; 0 means 10s.
	BlockDuration time.Duration
	// DialTimeout bounds connecting to a host; 0 means 5s (client-go: 30s).
	DialTimeout time.Duration
	// HealthCheckInterval is the HTTP/2 read-idle time after which a
	// connection is pinged, and the time the ping may take; 0 means 2s
	// (client-go: 30s and 15s). It is what notices a host that vanished.
	HealthCheckInterval time.Duration
	// Clock is for tests; nil means the real clock.
	Clock clock.PassiveClock
	// LocalAddresses are this machine's addresses; nil means those of its
	// network interfaces.
	LocalAddresses []net.IP
}

// Enable makes every client built from cfg (and from copies made afterwards)
// fail over between API servers. It wraps closest to the network, under any
// WrapTransport already set and under client-go's authentication, so it
// composes with them and with the KEP-3028 option (pkg/client/ifready).
func Enable(cfg *rest.Config, o Options) (*Pool, error) {
	if o.BlockDuration <= 0 {
		o.BlockDuration = 10 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.HealthCheckInterval <= 0 {
		o.HealthCheckInterval = 2 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	hosts := make([]string, 0, len(o.Hosts))
	for _, h := range o.Hosts {
		a, err := normalizeHost(h)
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, a)
	}
	if o.LocalAddresses == nil {
		o.LocalAddresses = interfaceAddresses()
	}
	pool := newPool(hosts, o.BlockDuration, o.Clock, isLocalFunc(o.LocalAddresses))
	var mu sync.Mutex
	copies := map[*http.Transport]*transports{}
	wrap := func(rt http.RoundTripper) http.RoundTripper {
		base := findHTTPTransport(rt)
		if base == nil {
			klog.ErrorS(nil, "Alternative services disabled for this client: its transport is not an *http.Transport", "type", fmt.Sprintf("%T", rt))
			return rt
		}
		mu.Lock()
		defer mu.Unlock()
		ts, ok := copies[base]
		if !ok {
			var err error
			if ts, err = newTransports(base, o); err != nil {
				klog.ErrorS(err, "Alternative services disabled for this client")
				return rt
			}
			copies[base] = ts
		}
		return &roundTripper{next: rt, pool: pool, ts: ts}
	}
	cfg.WrapTransport = transport.Wrappers(wrap, cfg.WrapTransport)
	return pool, nil
}

func normalizeHost(h string) (string, error) {
	s := h
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	s = strings.TrimRight(s, "/")
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		host, port = s, "443"
	}
	if host == "" || strings.ContainsAny(host, " /?#@") {
		return "", fmt.Errorf("alternative host %q: want host:port or an https URL", h)
	}
	return net.JoinHostPort(host, port), nil
}

func interfaceAddresses() []net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var ips []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ips = append(ips, n.IP)
		}
	}
	return ips
}

func isLocalFunc(local []net.IP) func(string) bool {
	return func(hostport string) bool {
		host, _, err := net.SplitHostPort(hostport)
		if err != nil {
			host = hostport
		}
		ip := net.ParseIP(host)
		if ip == nil {
			return host == "localhost"
		}
		if ip.IsLoopback() {
			return true
		}
		for _, l := range local {
			if l.Equal(ip) {
				return true
			}
		}
		return false
	}
}

// findHTTPTransport finds the *http.Transport under client-go's wrappers
// (its transport cache and CA-reloading holder).
func findHTTPTransport(rt http.RoundTripper) *http.Transport {
	for i := 0; i < 16 && rt != nil; i++ {
		if t, ok := rt.(*http.Transport); ok {
			return t
		}
		w, ok := rt.(utilnet.RoundTripperWrapper)
		if !ok {
			return nil
		}
		rt = w.WrappedRoundTripper()
	}
	return nil
}

// transports are two copies of client-go's transport (same TLS
// configuration, dialer and proxy): one for the original host, one whose TLS
// server name is ServerName for the alternatives. Both have a short dial
// timeout and a fast HTTP/2 health check, so a vanished host is noticed in
// seconds instead of client-go's 45.
type transports struct {
	original, alternative *http.Transport
}

func newTransports(base *http.Transport, o Options) (*transports, error) {
	orig, err := copyTransport(base, "", o)
	if err != nil {
		return nil, err
	}
	alt, err := copyTransport(base, ServerName, o)
	if err != nil {
		return nil, err
	}
	return &transports{original: orig, alternative: alt}, nil
}

func copyTransport(base *http.Transport, serverName string, o Options) (*http.Transport, error) {
	t := base.Clone()
	// The copy gets an HTTP/2 transport of its own, with its own health check.
	t.TLSNextProto = nil
	if serverName != "" {
		if t.TLSClientConfig == nil {
			return nil, errors.New("the client has no TLS configuration; alternative services need HTTPS")
		}
		t.TLSClientConfig.ServerName = serverName
	}
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	timeout := o.DialTimeout
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return dial(ctx, network, addr)
	}
	if t.TLSHandshakeTimeout == 0 || t.TLSHandshakeTimeout > o.DialTimeout {
		t.TLSHandshakeTimeout = o.DialTimeout
	}
	h2, err := http2.ConfigureTransports(t)
	if err != nil {
		return nil, fmt.Errorf("configuring HTTP/2: %w", err)
	}
	h2.ReadIdleTimeout = o.HealthCheckInterval
	h2.PingTimeout = o.HealthCheckInterval
	return t, nil
}

// roundTripper sends each request to the host the pool chooses.
type roundTripper struct {
	next http.RoundTripper
	pool *Pool
	ts   *transports
}

// WrappedRoundTripper lets client-go find the transport underneath.
func (rt *roundTripper) WrappedRoundTripper() http.RoundTripper { return rt.next }

var _ utilnet.RoundTripperWrapper = &roundTripper{}

// RoundTrip implements http.RoundTripper.
func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	// Only HTTPS is eligible (KEP-3037); connection upgrades (SPDY, websockets)
	// keep client-go's own path.
	if req.URL.Scheme != "https" || req.Header.Get("Upgrade") != "" {
		return rt.next.RoundTrip(req)
	}
	original := req.URL.Host
	plan := rt.pool.plan(original)
	var lastErr, originalErr error
	for i, host := range plan {
		if i > 0 {
			if req.GetBody != nil {
				body, err := req.GetBody()
				if err != nil {
					return nil, errors.Join(lastErr, fmt.Errorf("replaying the request body: %w", err))
				}
				req = req.Clone(req.Context())
				req.Body = body
			}
		}
		resp, connected, err := rt.send(req, host, original)
		if err == nil {
			err = bufferBody(req, resp)
		}
		if err == nil {
			if prev := rt.pool.succeeded(host, original, resp.Header.Values(wire.HeaderName)); prev != "" {
				metrics.switches.Inc()
				klog.InfoS("Switched API server", "from", prev, "to", host)
			}
			metrics.requests.WithLabelValues(host, "ok").Inc()
			return resp, nil
		}
		lastErr = err
		if host == original {
			originalErr = err
		}
		if req.Context().Err() != nil {
			metrics.requests.WithLabelValues(host, "canceled").Inc()
			return nil, err
		}
		f := Classify(err)
		metrics.requests.WithLabelValues(host, f.String()).Inc()
		if f == NotHostFailure {
			return nil, err
		}
		if rt.pool.failed(host, f, err) {
			metrics.blocks.WithLabelValues(f.String()).Inc()
			klog.InfoS("Blocked API server", "host", host, "failure", f, "err", err, "forever", f == CertificateFailure)
		}
		metrics.blocked.Set(float64(rt.pool.BlockedCount()))
		if !MayResend(req.Method, connected, bodyReplayable(req)) {
			return nil, err
		}
	}
	// Every host failed: the caller sees the error of the host it configured,
	// as it would without the option.
	if originalErr != nil {
		return nil, originalErr
	}
	return nil, lastErr
}

// maxBuffered bounds how much of a response bufferBody reads ahead.
const maxBuffered = 8 << 20

// bufferBody reads the body of a response to a request that may be sent
// again (idempotent, not a watch or a followed log) before handing it over,
// so that a server dying in the middle of its answer is a failure of this
// attempt, and the request moves to another host, instead of an error the
// caller gets while reading. Up to maxBuffered bytes are read ahead; the rest,
// if any, streams as before.
func bufferBody(req *http.Request, resp *http.Response) error {
	if !MayResend(req.Method, true, bodyReplayable(req)) || isStreaming(req) || resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(resp.Body, maxBuffered))
	if err != nil {
		resp.Body.Close()
		return fmt.Errorf("reading the response body from %s: %w", req.URL.Host, err)
	}
	if n < maxBuffered {
		resp.Body.Close()
		resp.Body = io.NopCloser(&buf)
		return nil
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(&buf, resp.Body), resp.Body}
	return nil
}

// isStreaming reports requests whose answer is open-ended: watches and
// followed logs.
func isStreaming(req *http.Request) bool {
	q := req.URL.Query()
	return q.Get("watch") == "true" || q.Get("watch") == "1" || q.Get("follow") == "true" || strings.Contains(req.URL.Path, "/watch/")
}

// send sends req to host and reports whether a connection to it was made,
// i.e. whether the server may have seen the request.
func (rt *roundTripper) send(req *http.Request, host, original string) (*http.Response, bool, error) {
	var connected atomic.Bool
	ctx := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	})
	out := req.WithContext(ctx)
	t := rt.ts.original
	if host != original {
		u := *req.URL
		u.Host = host
		out.URL = &u
		out.Host = ServerName
		t = rt.ts.alternative
	}
	resp, err := t.RoundTrip(out)
	return resp, connected.Load(), err
}
