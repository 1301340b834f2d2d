package altsvcclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// transports are two copies of client-go's transport (same TLS
// configuration, dialer and proxy): one for the original host, one whose TLS
// server name is ServerName for the alternatives. Both have a short dial
// timeout and, over HTTP/2, a fast health check, so a vanished host is
// noticed in seconds instead of client-go's 45.
//
// When client-go reads the client certificate from files and rotates it
// (a kubeconfig naming them), it closes every connection its dialer made
// once the files change, failing the requests in flight on them. The
// copies then dial on their own, and a new certificate gets new copies:
// new requests open connections that present it, while requests in flight
// finish on the old ones, which are closed once idle.
type transports struct {
	base     *http.Transport
	opts     Options
	rotating bool

	live *liveness // checks of hosts that requests wait on

	cur       atomic.Pointer[copies]
	lastCheck atomic.Int64 // unix nanoseconds of the last look at the certificate
	mu        sync.Mutex   // held while new copies are made
}

// copies are the two transports, made for one client certificate (its
// DER; nil without one).
type copies struct {
	original, alternative *http.Transport
	cert                  []byte
}

func newTransports(base *http.Transport, o Options) (*transports, error) {
	ts := &transports{base: base, opts: o, rotating: clientGoRotates(base), live: newLiveness(o.StallCheckAfter, o.StallCheckTimeout)}
	c, err := ts.makeCopies(clientCert(base))
	if err != nil {
		return nil, err
	}
	ts.cur.Store(c)
	return ts, nil
}

func (ts *transports) makeCopies(cert []byte) (*copies, error) {
	orig, err := copyTransport(ts.base, "", ts.opts, ts.rotating)
	if err != nil {
		return nil, err
	}
	alt, err := copyTransport(ts.base, ServerName, ts.opts, ts.rotating)
	if err != nil {
		return nil, err
	}
	return &copies{original: orig, alternative: alt, cert: cert}, nil
}

// certCheckInterval is how often the client certificate is compared with
// the copies': client-go itself reads the files every 2 s in
// steadyplane's binary.
const certCheckInterval = time.Second

// retireFor is how long the idle connections of copies made for an old
// certificate are closed as they become idle; after it, the transports'
// own idle timeout closes what a long request kept busy.
const retireFor = 2 * time.Minute

// current are the copies to send a new request through.
func (ts *transports) current() *copies {
	c := ts.cur.Load()
	if !ts.rotating {
		return c
	}
	now := ts.opts.Clock.Now().UnixNano()
	last := ts.lastCheck.Load()
	if now-last < int64(certCheckInterval) || !ts.lastCheck.CompareAndSwap(last, now) {
		return c
	}
	cert := clientCert(ts.base)
	if cert == nil || bytes.Equal(cert, c.cert) {
		return c
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if now := ts.cur.Load(); now != c {
		return now
	}
	fresh, err := ts.makeCopies(cert)
	if err != nil {
		return c
	}
	ts.cur.Store(fresh)
	go retire(c)
	return fresh
}

// retire closes the connections of old copies as they become idle.
func retire(c *copies) {
	for range int(retireFor / time.Second) {
		c.original.CloseIdleConnections()
		c.alternative.CloseIdleConnections()
		time.Sleep(time.Second)
	}
}

// clientCert is the client certificate base presents now (its leaf's
// DER), nil when it has none or it cannot be read.
func clientCert(base *http.Transport) []byte {
	if base.TLSClientConfig == nil || base.TLSClientConfig.GetClientCertificate == nil {
		return nil
	}
	c, err := base.TLSClientConfig.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil || c == nil || len(c.Certificate) == 0 {
		return nil
	}
	return c.Certificate[0]
}

// clientGoRotates says whether base is a transport client-go made for a
// client certificate it reads from files: its dialer is then
// connrotation's, which closes every connection when the files change.
func clientGoRotates(base *http.Transport) bool {
	if base.DialContext == nil || base.TLSClientConfig == nil || base.TLSClientConfig.GetClientCertificate == nil {
		return false
	}
	fn := runtime.FuncForPC(reflect.ValueOf(base.DialContext).Pointer())
	return fn != nil && strings.HasPrefix(fn.Name(), "k8s.io/client-go/util/connrotation.")
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

// minHandshakeTimeout is the least time the TLS handshake is given.
const minHandshakeTimeout = 5 * time.Second

func copyTransport(base *http.Transport, serverName string, o Options, ownDialer bool) (*http.Transport, error) {
	t := base.Clone()
	if t.TLSClientConfig == nil {
		return nil, errors.New("the client has no TLS configuration; alternative services need HTTPS")
	}
	if serverName != "" {
		t.TLSClientConfig.ServerName = serverName
	}
	dial := t.DialContext
	if dial == nil || ownDialer {
		// The dialer client-go puts under its rotating one.
		dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	timeout := o.DialTimeout
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return dial(ctx, network, addr)
	}
	// A handshake costs the server CPU: a busy server gets more time for it
	// than a dial (a SYN answered or not) takes.
	if handshake := max(o.DialTimeout, minHandshakeTimeout); t.TLSHandshakeTimeout == 0 || t.TLSHandshakeTimeout > handshake {
		t.TLSHandshakeTimeout = handshake
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

// phaseTrace follows one attempt through the transport's connection hooks
// (see Phase). Traces are reused: the hooks are bound once, and the
// transports call them only inside RoundTrip.
type phaseTrace struct {
	phase atomic.Int32
	trace httptrace.ClientTrace
}

var phaseTraces = sync.Pool{New: func() any {
	t := &phaseTrace{}
	t.trace.GetConn = func(string) { t.phase.CompareAndSwap(int32(BeforeConnecting), int32(Connecting)) }
	t.trace.GotConn = func(httptrace.GotConnInfo) { t.phase.Store(int32(Connected)) }
	return t
}}

// attempt sends req to host and reports how far it got with it (see Phase).
func (ts *transports) attempt(req *http.Request, host, original string, last bool) (*http.Response, Phase, error) {
	var pt *phaseTrace
	if httptrace.ContextClientTrace(req.Context()) == nil {
		pt = phaseTraces.Get().(*phaseTrace)
		pt.phase.Store(int32(BeforeConnecting))
		defer phaseTraces.Put(pt)
	} else {
		// The caller traces too: httptrace composes its hooks into ours,
		// so this trace is the request's own.
		pt = &phaseTrace{}
		pt.trace.GetConn = func(string) { pt.phase.CompareAndSwap(int32(BeforeConnecting), int32(Connecting)) }
		pt.trace.GotConn = func(httptrace.GotConnInfo) { pt.phase.Store(int32(Connected)) }
	}
	out := req.WithContext(httptrace.WithClientTrace(req.Context(), &pt.trace))
	c := ts.current()
	t := c.original
	if host != original {
		u := *req.URL
		u.Host = host
		out.URL = &u
		out.Host = ServerName
		t = c.alternative
	}
	// On the last host a stalled request has nowhere to go: it waits, as
	// it would without the option (a single server's etcd that stalls for
	// a second must not fail its writes).
	if ts.opts.StallCheckAfter > 0 && !last && watchesStall(out) {
		resp, err := ts.roundTripWatched(t, out, host)
		return resp, AttemptPhase(Phase(pt.phase.Load()), err, transportMayReplay(out)), err
	}
	resp, err := t.RoundTrip(out)
	return resp, AttemptPhase(Phase(pt.phase.Load()), err, transportMayReplay(out)), err
}

// classify implements attempter with Classify.
func (ts *transports) classify(err error, phase Phase) Failure { return Classify(err, phase) }

// accept implements attempter: the body of an answer that may be sent again
// is read before the caller sees it (bufferBody), and one still streaming
// from the network reports a break against its host.
func (ts *transports) accept(req *http.Request, resp *http.Response, pool *Pool, host string) error {
	stream := isStreaming(req)
	buffered, err := bufferBody(req, resp, stream)
	if err != nil {
		return err
	}
	if !buffered && !(stream && MayResumeWatch(req, resp)) {
		watchBody(req, resp, func(err error) { streamFailed(pool, host, err) })
	}
	return nil
}
