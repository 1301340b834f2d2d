package altsvcclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
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

// minHandshakeTimeout is the least time the TLS handshake is given.
const minHandshakeTimeout = 5 * time.Second

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
func (ts *transports) attempt(req *http.Request, host, original string) (*http.Response, Phase, error) {
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
	t := ts.original
	if host != original {
		u := *req.URL
		u.Host = host
		out.URL = &u
		out.Host = ServerName
		t = ts.alternative
	}
	resp, err := t.RoundTrip(out)
	return resp, Phase(pt.phase.Load()), err
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
