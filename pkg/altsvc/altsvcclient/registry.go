package altsvcclient

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ServerName is the name an alternative API server is addressed by: the TLS
// server name and the HTTP/2 :authority. Every API server's serving
// certificate carries it (it is the in-cluster name of the kubernetes service).
const ServerName = "kubernetes.default"

// DefaultHedgeAfter is Options.HedgeAfter's default: above what an API
// server on a healthy network takes for a GET (a few milliseconds; a large
// LIST from its cache some hundreds), below the second a client should
// need to leave a partitioned server.
const DefaultHedgeAfter = 300 * time.Millisecond

// DefaultStallCheckAfter and DefaultStallCheckTimeout are the defaults of
// Options.StallCheckAfter and StallCheckTimeout: a write on a server that
// vanished ends within 0.8 s, under the second a client should need to
// leave a partitioned server.
const (
	DefaultStallCheckAfter   = 300 * time.Millisecond
	DefaultStallCheckTimeout = 500 * time.Millisecond
)

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
	// DialTimeout bounds connecting to a host (TCP); 0 means 2s (client-go:
	// 30s): one lost SYN is sent again after 1s, and a host behind a
	// partition holds a request that has not been sent no longer than this,
	// writes included. The TLS handshake has max(DialTimeout, 5s).
	DialTimeout time.Duration
	// HealthCheckInterval is the HTTP/2 read-idle time after which a
	// connection is pinged, and the time the ping may take; 0 means 2s
	// (client-go: 30s and 15s). It is what notices a host that vanished.
	HealthCheckInterval time.Duration
	// HedgeAfter is how long a read (MayHedge) waits for an answer before
	// the next host is asked too, the first answer winning: what moves a
	// client off a black-holed server (nothing answers, not even a reset)
	// within a second. 0 means 300ms; a negative value turns it off.
	HedgeAfter time.Duration
	// StallCheckAfter is how long a request that may not be hedged (a
	// write) waits for its answer before the client checks its API server,
	// and then again while it waits: a quorum read there, of what the
	// request is about, within StallCheckTimeout. A server that fails the
	// check (black-holed, paused, its etcd stalled) ends the request with
	// an error, which for a write says its outcome is unknown, instead of
	// holding it until the HTTP/2 health check gives up on the connection
	// or etcd resumes. 0 means 300ms; a negative value turns the check off.
	StallCheckAfter time.Duration
	// StallCheckTimeout is how long the check's read may take; 0 means
	// 500ms, well above a quorum read's few milliseconds.
	StallCheckTimeout time.Duration
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
		o.DialTimeout = 2 * time.Second
	}
	if o.HealthCheckInterval <= 0 {
		o.HealthCheckInterval = 2 * time.Second
	}
	if o.HedgeAfter == 0 {
		o.HedgeAfter = DefaultHedgeAfter
	}
	if o.StallCheckAfter == 0 {
		o.StallCheckAfter = DefaultStallCheckAfter
	}
	if o.StallCheckTimeout <= 0 {
		o.StallCheckTimeout = DefaultStallCheckTimeout
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
