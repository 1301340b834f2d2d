// Package altsvcclient is the client half of KEP-3037 "client-go alternative
// services": an option on *rest.Config that lets any client-go user survive the
// loss of the API server it was configured with, without a load balancer.
//
//	cfg, _ := clientcmd.BuildConfigFromFlags("", kubeconfig)
//	pool, err := altsvcclient.Enable(cfg, altsvcclient.Options{})
//	cs := kubernetes.NewForConfigOrDie(cfg)
//
// The client learns the other API servers from the Alt-Svc header that
// steadyplane's API servers send to authenticated HTTP/2 clients (or from
// Options.Hosts, or a kubeconfig's steadyplane.io/alternative-services
// extension), and sends each request to one of them, chosen by Order. A host
// that cannot be reached is blocked for a while, one whose certificate does
// not verify is blocked for good. A request moves to another host only if
// that cannot duplicate it (MayResend). The round tripper never waits, and of
// status codes it only reads the KEP-3028 refusal (503 with
// X-Kubernetes-Ready: false), which is guaranteed unprocessed: client-go's own
// retry (429/5xx with Retry-After) works above it unchanged.
package altsvcclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
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

	"github.com/steadyplane/steadyplane/pkg/altsvc"
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
	// CacheDir, if set, is a directory where the hosts learned for the
	// configured cluster are kept (one 0600 file per cluster, written
	// atomically), so that a process started while its configured server is
	// down still finds the others.
	CacheDir string
	// BlockDuration is how long a host that failed at the network level is
	// left out; 0 means 10s.
	BlockDuration time.Duration
	// DialTimeout bounds connecting to a host; 0 means 5s (client-go: 30s).
	DialTimeout time.Duration
	// HealthCheckInterval is the HTTP/2 read-idle time after which a
	// connection is pinged, and the time the ping may take; 0 means 2s
	// (client-go: 30s and 15s). It is what notices a host that vanished.
	HealthCheckInterval time.Duration
	// CARefreshInterval is how often client-go is given the chance to re-read
	// a CA file that changed on disk (client-go itself re-reads it at most
	// every 5 minutes); 0 means 1 minute.
	CARefreshInterval time.Duration
	// Clock is for tests; nil means the real clock.
	Clock clock.PassiveClock
	// LocalAddresses are this machine's addresses; nil means those of its
	// network interfaces.
	LocalAddresses []net.IP
}

func (o *Options) defaults() {
	if o.BlockDuration <= 0 {
		o.BlockDuration = 10 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.HealthCheckInterval <= 0 {
		o.HealthCheckInterval = 2 * time.Second
	}
	if o.CARefreshInterval <= 0 {
		o.CARefreshInterval = time.Minute
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.LocalAddresses == nil {
		o.LocalAddresses = interfaceAddresses()
	}
}

// Enable makes every client built from cfg (and from copies made afterwards)
// fail over between API servers. It wraps closest to the network, under any
// WrapTransport already set and under client-go's authentication, so it
// composes with them and with the KEP-3028 option (pkg/ifready/ifreadyclient).
//
// The returned Pool is that of the cluster cfg points at. A copy of cfg
// pointed at another server or trusting other CAs gets a pool of its own: a
// cluster's hosts are never used for another's requests. Enable refuses a
// config that skips TLS verification: the alternatives are reached by IP and
// trusted only because their certificate verifies.
func Enable(cfg *rest.Config, o Options) (*Pool, error) {
	return NewRegistry(o).Enable(cfg, o.Hosts)
}

// Registry holds the pools of the clusters its clients reach, so that
// several configs of one process (kubectl builds a few) share what they
// learn: which servers exist, which are down, which one works.
type Registry struct {
	r *registry
}

// NewRegistry returns an empty registry; o.Hosts is ignored (see Enable).
func NewRegistry(o Options) *Registry {
	o.defaults()
	return &Registry{r: &registry{opts: o, configured: map[string][]string{}, copies: map[*http.Transport]*transports{}}}
}

// Enable is the package's Enable for a config whose clients share r's pools;
// hosts are alternatives of the server cfg points at, known in advance.
func (reg *Registry) Enable(cfg *rest.Config, hosts []string) (*Pool, error) {
	if cfg.Insecure {
		return nil, errors.New("alternative services need TLS verification, but the client config skips it (insecure-skip-tls-verify): an alternative API server would be trusted without proof of who it is")
	}
	r := reg.r
	normalized := make([]string, 0, len(hosts))
	for _, h := range hosts {
		a, err := normalizeHost(h)
		if err != nil {
			return nil, err
		}
		normalized = append(normalized, a)
	}
	origin, err := originOf(cfg.Host)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("alternative services: %w", err)
	}
	var roots *x509.CertPool
	if tlsCfg != nil {
		roots = tlsCfg.RootCAs
	}
	r.mu.Lock()
	if len(normalized) > 0 {
		r.configured[origin] = normalized
	}
	r.mu.Unlock()
	pool := r.pool(origin, roots)
	pool.configure(r.configuredHosts(origin))
	if r.opts.CacheDir != "" && strings.HasPrefix(origin, "https://") && pool.cacheFileName() == "" {
		ca, err := caBytes(cfg)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(r.opts.CacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("alternative services cache: %w", err)
		}
		pool.setCacheFile(filepath.Join(r.opts.CacheDir, CacheFileName(origin, ca)))
	}
	cfg.WrapTransport = transport.Wrappers(r.wrap, cfg.WrapTransport)
	return pool, nil
}

// CacheFileName is the name of the cache file of the cluster at origin
// trusted through ca (PEM): a hash of both, so that two clusters never share
// a file.
func CacheFileName(origin string, ca []byte) string {
	h := sha256.New()
	h.Write([]byte(origin))
	h.Write([]byte{0})
	h.Write(ca)
	return hex.EncodeToString(h.Sum(nil)[:16]) + ".json"
}

// caBytes returns the CA a config trusts, as client-go loads it.
func caBytes(cfg *rest.Config) ([]byte, error) {
	c := rest.CopyConfig(cfg)
	if err := rest.LoadTLSFiles(c); err != nil {
		return nil, fmt.Errorf("alternative services: %w", err)
	}
	return c.CAData, nil
}

// originOf returns scheme://host:port of a rest.Config's Host.
func originOf(host string) (string, error) {
	scheme, hostport, err := splitHost(host)
	if err != nil {
		return "", fmt.Errorf("alternative services: client config host %q: %w", host, err)
	}
	return scheme + "://" + hostport, nil
}

// splitHost parses a host as a rest.Config or a kubeconfig gives it: a URL,
// or host[:port] meaning https. It returns the scheme and host:port, with the
// scheme's default port when none is given.
func splitHost(h string) (scheme, hostport string, err error) {
	s := h
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Hostname() == "" || u.User != nil {
		return "", "", fmt.Errorf("want host:port or an https URL")
	}
	scheme = strings.ToLower(u.Scheme)
	return scheme, CanonicalHost(scheme, u.Host), nil
}

// normalizeHost returns an alternative host, given as host:port or a URL, as
// host:port.
func normalizeHost(h string) (string, error) {
	_, hostport, err := splitHost(h)
	if err != nil {
		return "", fmt.Errorf("alternative host %q: %w", h, err)
	}
	return hostport, nil
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

// registry holds the pools of every cluster the clients of one Enable reach,
// and the transport copies made for each client-go transport.
type registry struct {
	opts Options

	mu         sync.Mutex
	configured map[string][]string // origin -> its alternatives known in advance
	pools      []*poolEntry
	copies     map[*http.Transport]*transports
}

func (r *registry) configuredHosts(origin string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.configured[origin]
}

type poolEntry struct {
	origin string
	roots  *x509.CertPool
	pool   *Pool
}

// pool returns the pool of the cluster at origin trusted through roots.
// Pools are told apart by CertPool.Equal, which compares certificates, so
// client-go's CA reload (a new CertPool with the same certificates) keeps
// the pool, and a copy trusting another CA gets its own.
func (r *registry) pool(origin string, roots *x509.CertPool) *Pool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.pools {
		if e.origin == origin && e.roots.Equal(roots) {
			return e.pool
		}
	}
	// The configured alternatives belong to the configured server; a
	// cluster that merely changed its CA keeps them, and a server with
	// other certificates at that address cannot pass for them anyway.
	hosts := r.configured[origin]
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	p := newPool(hosts, r.opts.BlockDuration, r.opts.Clock, isLocalFunc(r.opts.LocalAddresses), binary.LittleEndian.Uint64(seed[:])|1)
	r.pools = append(r.pools, &poolEntry{origin: origin, roots: roots, pool: p})
	return p
}

// transportsFor returns the copies of base, made on first use.
func (r *registry) transportsFor(base *http.Transport) (*transports, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ts, ok := r.copies[base]; ok {
		return ts, nil
	}
	ts, err := newTransports(base, r.opts)
	if err != nil {
		return nil, err
	}
	r.copies[base] = ts
	return ts, nil
}

// wrap is the WrapTransport of every config made from the enabled one.
func (r *registry) wrap(rt http.RoundTripper) http.RoundTripper {
	if up := upgradeTLS(rt); up != nil {
		return &upgradeRoundTripper{next: rt, reg: r}
	}
	base := findHTTPTransport(rt)
	if base == nil {
		klog.ErrorS(nil, "Alternative services disabled for this client: its transport is not an *http.Transport", "type", fmt.Sprintf("%T", rt))
		return rt
	}
	if base.TLSClientConfig == nil || base.TLSClientConfig.InsecureSkipVerify {
		klog.ErrorS(nil, "Alternative services disabled for this client: it does not verify TLS certificates")
		return rt
	}
	if _, err := r.transportsFor(base); err != nil {
		klog.ErrorS(err, "Alternative services disabled for this client")
		return rt
	}
	return &roundTripper{next: rt, reg: r}
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
// timeout and, over HTTP/2, a fast health check, so a vanished host is
// noticed in seconds instead of client-go's 45.
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

// HTTP2Allowed tells, as client-go does, whether a transport may speak
// HTTP/2: not when DISABLE_HTTP2 is set, nor when the TLS configuration
// lists protocols without h2.
func HTTP2Allowed(disableEnv string, nextProtos []string) bool {
	if disableEnv != "" {
		return false
	}
	return len(nextProtos) == 0 || contains(nextProtos, "h2")
}

func copyTransport(base *http.Transport, serverName string, o Options) (*http.Transport, error) {
	t := base.Clone()
	if t.TLSClientConfig == nil {
		return nil, errors.New("the client has no TLS configuration; alternative services need HTTPS")
	}
	if serverName != "" {
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
	// The copy gets an HTTP/2 transport of its own, with its own health
	// check, unless client-go would not speak HTTP/2 here.
	if !HTTP2Allowed(os.Getenv("DISABLE_HTTP2"), base.TLSClientConfig.NextProtos) {
		t.TLSClientConfig.NextProtos = withoutH2(t.TLSClientConfig.NextProtos)
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		t.ForceAttemptHTTP2 = false
		return t, nil
	}
	t.TLSNextProto = nil
	t.TLSClientConfig.NextProtos = withoutH2(t.TLSClientConfig.NextProtos)
	h2, err := http2.ConfigureTransports(t)
	if err != nil {
		return nil, fmt.Errorf("configuring HTTP/2: %w", err)
	}
	h2.ReadIdleTimeout = o.HealthCheckInterval
	h2.PingTimeout = o.HealthCheckInterval
	return t, nil
}

// withoutH2 drops h2 from a protocol list that ConfigureTransports is about
// to add it to again (it would be listed twice).
func withoutH2(protos []string) []string {
	out := make([]string, 0, len(protos))
	for _, p := range protos {
		if p != "h2" {
			out = append(out, p)
		}
	}
	return out
}

// roundTripper sends each request to the host the pool of its cluster
// chooses.
type roundTripper struct {
	next http.RoundTripper
	reg  *registry

	lastCARefresh atomic.Int64 // unix nanoseconds
	lastPool      atomic.Pointer[poolLookup]
	lastCopies    atomic.Pointer[copiesLookup]
}

// copiesLookup is a round tripper's last transportsFor: client-go's
// transport changes only when its CA file does.
type copiesLookup struct {
	base *http.Transport
	ts   *transports
}

// poolLookup is a round tripper's last pool lookup: almost every request of
// a client goes to the same cluster.
type poolLookup struct {
	original string
	roots    *x509.CertPool
	pool     *Pool
}

// poolFor returns the pool of the cluster at original (host:port) trusted
// through roots.
func (rt *roundTripper) poolFor(original string, roots *x509.CertPool) *Pool {
	if l := rt.lastPool.Load(); l != nil && l.original == original && l.roots == roots {
		return l.pool
	}
	p := rt.reg.pool("https://"+original, roots)
	rt.lastPool.Store(&poolLookup{original: original, roots: roots, pool: p})
	return p
}

// WrappedRoundTripper lets client-go find the transport underneath.
func (rt *roundTripper) WrappedRoundTripper() http.RoundTripper { return rt.next }

var _ utilnet.RoundTripperWrapper = &roundTripper{}

// current returns the transport copies of client-go's transport as it is
// now. client-go replaces its transport when a CA file changes on disk, but
// looks only inside its own RoundTrip, which requests sent through the copies
// never reach; so every CARefreshInterval a request that is already canceled
// is passed through it: client-go re-reads the file and dials nothing.
func (rt *roundTripper) current() (*transports, *http.Transport, error) {
	if _, plain := rt.next.(*http.Transport); !plain {
		now := rt.reg.opts.Clock.Now().UnixNano()
		last := rt.lastCARefresh.Load()
		if now-last >= int64(rt.reg.opts.CARefreshInterval) && rt.lastCARefresh.CompareAndSwap(last, now) {
			refreshCA(rt.next)
		}
	}
	base := findHTTPTransport(rt.next)
	if base == nil {
		return nil, nil, errors.New("alternative services: client-go's transport is gone")
	}
	if l := rt.lastCopies.Load(); l != nil && l.base == base {
		return l.ts, base, nil
	}
	ts, err := rt.reg.transportsFor(base)
	if err == nil {
		rt.lastCopies.Store(&copiesLookup{base: base, ts: ts})
	}
	return ts, base, err
}

func refreshCA(next http.RoundTripper) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://ca-refresh.invalid/", nil)
	if err != nil {
		return
	}
	if resp, err := next.RoundTrip(req); err == nil {
		resp.Body.Close()
	}
}

// RoundTrip implements http.RoundTripper.
func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	// Only HTTPS is eligible (KEP-3037).
	if req.URL.Scheme != "https" {
		return rt.next.RoundTrip(req)
	}
	stream := isStreaming(req)
	resp, pool, host, err := rt.send(req, stream)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	if stream && MayResumeWatch(req, resp) {
		// One reader reads a body: host needs no lock.
		resp.Body = newResumingWatch(req, resp, func(r *http.Request) (*http.Response, error) {
			resp, _, h, err := rt.send(r, true)
			if err == nil {
				host = h
			}
			return resp, err
		}, func(err error) { rt.streamFailed(pool, host, err) })
	}
	return resp, nil
}

// send sends req to the first host of its cluster's plan that answers, and
// returns the answer with the pool and the host that gave it.
// stream tells whether req is a watch or a followed log (isStreaming).
func (rt *roundTripper) send(req *http.Request, stream bool) (*http.Response, *Pool, string, error) {
	ts, base, err := rt.current()
	if err != nil {
		return nil, nil, "", err
	}
	original := CanonicalHost(req.URL.Scheme, req.URL.Host)
	pool := rt.poolFor(original, base.TLSClientConfig.RootCAs)
	learn := MayLearnFrom(req.URL.Path)
	plan := pool.plan(original)
	var lastErr, originalErr error
	var refusal *http.Response // the last KEP-3028 refusal, returned if no host does better
	for i, host := range plan {
		if i > 0 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, pool, "", errors.Join(lastErr, fmt.Errorf("replaying the request body: %w", err))
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
		resp, phase, err := sendTo(ts, req, host, original)
		buffered := false
		if err == nil {
			if f, wait := ClassifyResponse(resp.StatusCode, resp.Header); f == NotReadyFailure {
				rt.recordFailure(pool, host, f, errors.New("answered 503 with X-Kubernetes-Ready: false"), wait)
				if i == len(plan)-1 || !bodyReplayable(req) {
					return resp, pool, host, nil // client-go's retry honours its Retry-After
				}
				// Refused unprocessed: keep the answer in case no other host
				// does better, and move on at once.
				refusal = keepRefusal(resp)
				continue
			}
			buffered, err = bufferBody(req, resp, stream)
		}
		if err == nil {
			if refusal != nil {
				refusal.Body.Close()
			}
			var altSvc []string
			if learn {
				altSvc = resp.Header.Values(altsvc.HeaderName)
			}
			if prev := pool.succeeded(host, original, altSvc); prev != "" {
				metrics.switches.Inc()
				klog.InfoS("Switched API server", "from", prev, "to", host)
			}
			metrics.requests.WithLabelValues(host, "ok").Inc()
			if !buffered && !(stream && MayResumeWatch(req, resp)) {
				watchBody(req, resp, func(err error) { rt.streamFailed(pool, host, err) })
			}
			return resp, pool, host, nil
		}
		lastErr = err
		if host == original {
			originalErr = err
		}
		if req.Context().Err() != nil {
			metrics.requests.WithLabelValues(host, "canceled").Inc()
			return nil, pool, "", err
		}
		f := Classify(err, phase)
		if f == NotHostFailure {
			metrics.requests.WithLabelValues(host, f.String()).Inc()
			return nil, pool, "", err
		}
		rt.recordFailure(pool, host, f, err, 0)
		if !MayResend(req.Method, phase == Connected, bodyReplayable(req)) {
			return nil, pool, "", err
		}
	}
	if refusal != nil {
		// Every host was either refusing or down: client-go's retry honours
		// the refusal's Retry-After.
		return refusal, pool, "", nil
	}
	// Every host failed: the caller sees the error of the host it configured,
	// as it would without the option.
	if originalErr != nil {
		return nil, pool, "", originalErr
	}
	return nil, pool, "", lastErr
}

func (rt *roundTripper) recordFailure(pool *Pool, host string, f Failure, err error, wait time.Duration) {
	metrics.requests.WithLabelValues(host, f.String()).Inc()
	if pool.failed(host, f, err, wait) {
		metrics.blocks.WithLabelValues(f.String()).Inc()
		klog.InfoS("Blocked API server", "host", host, "failure", f, "err", err, "forever", f == CertificateFailure)
	}
	metrics.blocked.Set(float64(pool.BlockedCount()))
}

// streamFailed counts a watch or stream that broke midway against its host,
// so that the client's next request (the re-watch) goes elsewhere.
func (rt *roundTripper) streamFailed(pool *Pool, host string, err error) {
	if f := Classify(err, Connected); f == NetworkFailure {
		rt.recordFailure(pool, host, f, fmt.Errorf("stream broke: %w", err), 0)
	}
}

// keepRefusal returns resp with its (small) body read into memory, so the
// connection is free and the answer can still be returned later.
func keepRefusal(resp *http.Response) *http.Response {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

// maxBuffered bounds how much of a response bufferBody reads ahead.
const maxBuffered = 8 << 20

// bufferBody reads the body of a response to a request that may be sent
// again (idempotent, not a watch or a followed log) before handing it over,
// so that a server dying in the middle of its answer is a failure of this
// attempt, and the request moves to another host, instead of an error the
// caller gets while reading. Up to maxBuffered bytes are read ahead; the rest,
// if any, streams as before.
// It reports whether the whole body is now in memory.
func bufferBody(req *http.Request, resp *http.Response, stream bool) (bool, error) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return true, nil
	}
	if stream || !MayResend(req.Method, true, bodyReplayable(req)) {
		return false, nil
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(resp.Body, maxBuffered))
	if err != nil {
		resp.Body.Close()
		return false, fmt.Errorf("reading the response body from %s: %w", req.URL.Host, err)
	}
	if n < maxBuffered {
		resp.Body.Close()
		resp.Body = io.NopCloser(&buf)
		return true, nil
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(&buf, resp.Body), resp.Body}
	return false, nil
}

// watchBody makes a read error on a body that is still streaming from the
// network (a watch, a followed log, the rest of a large answer) call
// onError, unless the caller ended the request.
func watchBody(req *http.Request, resp *http.Response, onError func(error)) {
	resp.Body = &reportingBody{ReadCloser: resp.Body, ctx: req.Context(), onError: onError}
}

// reportingBody reports the first read error that is not the end of the
// body nor the caller's doing: a cancelled request, or a body the caller
// closed (a watch stopped while a goroutine still reads it).
type reportingBody struct {
	io.ReadCloser
	ctx      context.Context
	onError  func(error)
	reported atomic.Bool
	closed   atomic.Bool
}

func (b *reportingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.ctx.Err() == nil && !b.closed.Load() && b.reported.CompareAndSwap(false, true) {
		b.onError(err)
	}
	return n, err
}

// Close marks the end as the caller's before the read it interrupts fails.
func (b *reportingBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

// isStreaming reports requests whose answer is open-ended: watches and
// followed logs.
func isStreaming(req *http.Request) bool {
	q := req.URL.Query()
	return q.Get("watch") == "true" || q.Get("watch") == "1" || q.Get("follow") == "true" || strings.Contains(req.URL.Path, "/watch/")
}

// sendTo sends req to host and reports how far it got with it (see Phase).
func sendTo(ts *transports, req *http.Request, host, original string) (*http.Response, Phase, error) {
	var phase atomic.Int32
	ctx := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GetConn: func(string) { phase.CompareAndSwap(int32(BeforeConnecting), int32(Connecting)) },
		GotConn: func(httptrace.GotConnInfo) { phase.Store(int32(Connected)) },
	})
	out := req.WithContext(ctx)
	t := ts.original
	if host != original {
		u := *req.URL
		u.Host = host
		out.URL = &u
		out.Host = ServerName
		t = ts.alternative
	}
	resp, err := t.RoundTrip(out)
	return resp, Phase(phase.Load()), err
}
