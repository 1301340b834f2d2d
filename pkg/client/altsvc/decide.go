package altsvc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"

	"golang.org/x/net/http2"
)

// OrderInput is what Order decides from.
type OrderInput struct {
	// Original is the host of the request as the client built it.
	Original string
	// Current is the host the last successful request used ("" before any).
	Current string
	// Candidates are the known alternatives, in the order they were listed.
	Candidates []string
	// Blocked reports whether a host may not be tried now.
	Blocked func(host string) bool
	// Local reports whether a host is an address of this machine.
	Local func(host string) bool
	// LastResort are hosts blocked after a network failure, soonest
	// unblocked first: tried only when everything else has failed, since a
	// host that was down a few seconds ago may be back (a restart takes less
	// than a block), and trying it costs little next to failing the request.
	LastResort []string
}

// Order returns the hosts to try for one request, best first, following
// KEP-3037: stick to the host that worked; otherwise prefer a local
// alternative, then the original host if it is listed, then the others in the
// server's order. Blocked hosts are left out. The original host comes after
// them if it is not already in the list, blocked or not: when every
// alternative has failed the client falls back to what it was configured with.
// Only then come the LastResort hosts.
func Order(in OrderInput) []string {
	usable := make([]string, 0, len(in.Candidates)+1)
	for _, h := range in.Candidates {
		if h == "" || contains(usable, h) || (in.Blocked != nil && in.Blocked(h)) {
			continue
		}
		usable = append(usable, h)
	}
	rank := func(h string) int {
		switch {
		case h == in.Current:
			return 0
		case in.Local != nil && in.Local(h):
			return 1
		case h == in.Original:
			return 2
		default:
			return 3
		}
	}
	// A stable insertion sort by rank keeps the server's order within a rank.
	for i := 1; i < len(usable); i++ {
		for j := i; j > 0 && rank(usable[j]) < rank(usable[j-1]); j-- {
			usable[j], usable[j-1] = usable[j-1], usable[j]
		}
	}
	if !contains(usable, in.Original) {
		usable = append(usable, in.Original)
	}
	for _, h := range in.LastResort {
		if h != "" && !contains(usable, h) {
			usable = append(usable, h)
		}
	}
	return usable
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Failure says what a failed attempt tells about the host it was sent to.
type Failure int

const (
	// NotHostFailure: the request failed for a reason that another host
	// would not change (the caller's context ended, a malformed request).
	NotHostFailure Failure = iota
	// NetworkFailure: the host could not be reached or the connection broke;
	// the host is blocked for a while.
	NetworkFailure
	// CertificateFailure: the host's certificate did not verify; it is not
	// the API server it claims to be, and is blocked for good.
	CertificateFailure
)

func (f Failure) String() string {
	switch f {
	case NetworkFailure:
		return "network"
	case CertificateFailure:
		return "certificate"
	default:
		return "not the host's fault"
	}
}

// Classify tells what err, returned by a transport for a request whose own
// context has not ended, says about the host.
func Classify(err error) Failure {
	if err == nil {
		return NotHostFailure
	}
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verification     *tls.CertificateVerificationError
	)
	if errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verification) {
		return CertificateFailure
	}
	if errors.Is(err, context.Canceled) {
		return NotHostFailure
	}
	var (
		opErr  *net.OpError
		netErr net.Error
		goAway http2.GoAwayError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ETIMEDOUT),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &opErr), errors.As(err, &goAway), errors.As(err, &netErr):
		return NetworkFailure
	}
	// x/net/http2 reports a connection closed by its health check or by the
	// peer as plain errors.
	msg := err.Error()
	for _, s := range []string{"http2: client connection lost", "http2: client connection force closed", "connection reset by peer", "broken pipe", "use of closed network connection", "http2: server sent GOAWAY"} {
		if strings.Contains(msg, s) {
			return NetworkFailure
		}
	}
	return NotHostFailure
}

// MayResend reports whether a request that failed on one host may be sent to
// another. A request that never got a connection reached no server and may
// always be resent; once a connection was made, the server may have acted on
// it, so only methods that are safe to repeat are resent. A body that cannot be
// produced again (an opaque reader) is never resent.
func MayResend(method string, connected, bodyReplayable bool) bool {
	if !bodyReplayable {
		return false
	}
	if !connected {
		return true
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, "":
		return true
	}
	return false
}

// bodyReplayable reports whether req's body can be produced again.
func bodyReplayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}
