package altsvcclient

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"syscall"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/transport/websocket"
	"k8s.io/klog/v2"
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
// port-forward to another API server when the dial fails. An upgrading round
// tripper is made for one request, so setting its TLS server name for the
// host being tried is safe.
type upgradeRoundTripper struct {
	next http.RoundTripper
	reg  *registry
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
	serverName := tlsCfg.ServerName
	var firstErr error
	for _, host := range pool.plan(original) {
		out := req.Clone(req.Context())
		tlsCfg.ServerName = serverName
		if host != original {
			out.URL.Host = host
			out.Host = ServerName
			tlsCfg.ServerName = ServerName
		}
		resp, err := rt.next.RoundTrip(out)
		if err == nil {
			if prev := pool.succeeded(host, original, nil); prev != "" {
				klog.InfoS("Switched API server for a connection upgrade", "from", prev, "to", host)
			}
			return resp, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if req.Context().Err() != nil {
			return nil, err
		}
		f := ClassifyUpgrade(err)
		if f == NotHostFailure {
			return nil, err
		}
		if pool.failed(host, f, err, 0) {
			klog.InfoS("Blocked API server", "host", host, "failure", f, "err", err)
		}
	}
	return nil, firstErr
}
