package altsvcclient

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

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
	ts, base, err := rt.current()
	if err != nil {
		return nil, err
	}
	original := CanonicalHost(req.URL.Scheme, req.URL.Host)
	pool := rt.poolFor(original, base.TLSClientConfig.RootCAs)
	learn := MayLearnFrom(req.URL.Path)
	resp, host, err := tryHosts(ts, req, pool, pool.plan(original), original, learn, rt.reg.opts.HedgeAfter)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	if isStreaming(req) && MayResumeWatch(req, resp) {
		rt.resumeWatch(req, resp, pool, host, learn)
	}
	return resp, nil
}

// resumeWatch makes a JSON watch's body go on on the next host when its
// stream breaks (see resumingWatch).
func (rt *roundTripper) resumeWatch(req *http.Request, resp *http.Response, pool *Pool, host string, learn bool) {
	// One reader reads a body: host needs no lock.
	resp.Body = newResumingWatch(req, resp, func(r *http.Request) (*http.Response, error) {
		ts, _, err := rt.current()
		if err != nil {
			return nil, err
		}
		original := CanonicalHost(r.URL.Scheme, r.URL.Host)
		resp, h, err := tryHosts(ts, r, pool, pool.plan(original), original, learn, rt.reg.opts.HedgeAfter)
		if err == nil {
			host = h
		}
		return resp, err
	}, func(err error) { streamFailed(pool, host, err) })
}

// streamFailed counts a watch or stream that broke midway against its host,
// so that the client's next request (the re-watch) goes elsewhere.
func streamFailed(pool *Pool, host string, err error) {
	if f := Classify(err, Connected); f == NetworkFailure {
		metrics.requests.WithLabelValues(host, f.String()).Inc()
		recordFailure(pool, host, f, fmt.Errorf("stream broke: %w", err), 0)
	}
}
