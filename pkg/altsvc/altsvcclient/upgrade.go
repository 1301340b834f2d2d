package altsvcclient

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"syscall"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/transport/websocket"
)

// upgradeTLS returns the TLS configuration of a round tripper that upgrades
// its connection (client-go's websocket and SPDY round trippers, behind
// exec, attach and port-forward), or nil for any other.
func upgradeTLS(rt http.RoundTripper) *tls.Config {
	switch t := rt.(type) {
	case *websocket.RoundTripper:
		return t.TLSConfig
	case utilnet.TLSClientConfigHolder:
		if _, isHTTP := rt.(*http.Transport); !isHTTP {
			return t.TLSClientConfig()
		}
	}
	return nil
}

// ClassifyUpgrade tells what an error of an upgrading round tripper says
// about the host. These dial by themselves, so the phase is read from the
// error: a failed dial or TLS handshake never reached the server and moves
// the request; anything later might have started a command, and does not.
func ClassifyUpgrade(err error) Failure {
	if f := Classify(err, Connected); f == CertificateFailure {
		return f
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return NetworkFailure
	}
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		return NetworkFailure
	}
	return NotHostFailure
}

// upgradeRoundTripper moves the connect step of an exec, attach or
// port-forward to another API server when the dial fails, through the same
// attempt loop as every other request (tryHosts). An upgrading round
// tripper is made for one request, so setting its TLS server name for the
// host being tried is safe.
type upgradeRoundTripper struct {
	next http.RoundTripper
	reg  *registry

	tlsCfg     *tls.Config // next's, while a request is under way
	serverName string      // the server name next had for the original host
}

// WrappedRoundTripper lets client-go find the round tripper underneath.
func (rt *upgradeRoundTripper) WrappedRoundTripper() http.RoundTripper { return rt.next }

// RoundTrip implements http.RoundTripper.
func (rt *upgradeRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	tlsCfg := upgradeTLS(rt.next)
	if req.URL.Scheme != "https" || tlsCfg == nil || tlsCfg.InsecureSkipVerify {
		return rt.next.RoundTrip(req)
	}
	original := CanonicalHost(req.URL.Scheme, req.URL.Host)
	pool := rt.reg.pool("https://"+original, tlsCfg.RootCAs)
	rt.tlsCfg, rt.serverName = tlsCfg, tlsCfg.ServerName
	resp, _, err := tryHosts(rt, req, pool, pool.plan(original), original, false, 0)
	return resp, err
}

// attempt implements attempter: the upgrading round tripper dials host by
// itself, so how far it got is read from its error (ClassifyUpgrade).
func (rt *upgradeRoundTripper) attempt(req *http.Request, host, original string, _ bool) (*http.Response, Phase, error) {
	out := req.Clone(req.Context())
	rt.tlsCfg.ServerName = rt.serverName
	if host != original {
		out.URL.Host = host
		out.Host = ServerName
		rt.tlsCfg.ServerName = ServerName
	}
	resp, err := rt.next.RoundTrip(out)
	if err != nil && ClassifyUpgrade(err) != NotHostFailure {
		return nil, Connecting, err
	}
	return resp, Connected, err
}

// classify implements attempter with ClassifyUpgrade.
func (rt *upgradeRoundTripper) classify(err error, _ Phase) Failure { return ClassifyUpgrade(err) }

// accept implements attempter: an upgraded connection is the caller's as it
// is.
func (rt *upgradeRoundTripper) accept(*http.Request, *http.Response, *Pool, string) error { return nil }
