package altsvcclient

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http2"

	"github.com/steadyplane/steadyplane/pkg/ifready"
)

// OrderInput is what Order decides from.
type OrderInput struct {
	// Original is the host of the request as the client built it, as
	// host:port (see CanonicalHost).
	Original string
	// Current is the host the last successful request used ("" before any).
	Current string
	// Candidates are the known alternatives, in the order they were listed.
	Candidates []string
	// Blocked reports whether a host may not be tried now.
	Blocked func(host string) bool
	// Local reports whether a host is an address of this machine.
	Local func(host string) bool
	// Seed spreads clients over the alternatives: each client orders the
	// alternatives of equal rank by a hash of its seed and the host, so that
	// clients given the same list do not all pick its first entry. 0 keeps
	// the listed order.
	Seed uint64
	// LastResort are hosts blocked after a network failure, soonest
	// unblocked first: tried only when everything else has failed, since a
	// host that was down a few seconds ago may be back (a restart takes less
	// than a block), and trying it costs little next to failing the request.
	LastResort []string
}

// Order returns the hosts to try for one request, best first, following
// KEP-3037 with one change: stick to the host that worked; otherwise prefer a
// local alternative, then the original host (listed or not: a DNS name or a
// load balancer that works is kept), then the other alternatives in the
// client's own order (Seed). Blocked hosts are left out. The original host
// comes after them if it is blocked: when every alternative has failed the
// client falls back to what it was configured with. Only then come the
// LastResort hosts.
func Order(in OrderInput) []string {
	blocked := func(h string) bool { return in.Blocked != nil && in.Blocked(h) }
	usable := make([]string, 0, len(in.Candidates)+2)
	for _, h := range in.Candidates {
		if h == "" || contains(usable, h) || blocked(h) {
			continue
		}
		usable = append(usable, h)
	}
	if in.Original != "" && !contains(usable, in.Original) && !blocked(in.Original) {
		usable = append(usable, in.Original)
	}
	// The current host counts only while it is still a candidate or the
	// original: a server that left the list is not kept just because it was
	// in use.
	current := ""
	if contains(usable, in.Current) {
		current = in.Current
	}
	rank := func(h string) int {
		switch {
		case h == current:
			return 0
		case in.Local != nil && in.Local(h):
			return 1
		case h == in.Original:
			return 2
		default:
			return 3
		}
	}
	slices.SortStableFunc(usable, func(a, b string) int {
		ra, rb := rank(a), rank(b)
		if ra != rb {
			return ra - rb
		}
		if ra == 3 && in.Seed != 0 {
			return cmp.Compare(spread(in.Seed, a), spread(in.Seed, b))
		}
		return 0
	})
	if in.Original != "" && !contains(usable, in.Original) {
		usable = append(usable, in.Original)
	}
	for _, h := range in.LastResort {
		if h != "" && !contains(usable, h) {
			usable = append(usable, h)
		}
	}
	return usable
}

// spread is the position of host in the order of the client with seed: a
// hash of the host mixed with the seed by splitmix64's finalizer, so that
// hosts differing in one byte land far apart.
func spread(seed uint64, host string) uint64 {
	// FNV-1a, inline: hash.Hash would allocate on every comparison.
	z := uint64(14695981039346656037)
	for i := 0; i < len(host); i++ {
		z ^= uint64(host[i])
		z *= 1099511628211
	}
	z ^= seed
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// CanonicalHost returns the host:port a URL's host names, with the scheme's
// default port when none is given, so that "lb.example" and
// "lb.example:443" are one host.
func CanonicalHost(scheme, host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := "443"
	if scheme == "http" {
		port = "80"
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), port)
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
	// NotReadyFailure: the host refused the request because it has not
	// finished initializing (KEP-3028: 503 with X-Kubernetes-Ready: false)
	// or because it shuts down (ShuttingDown). The request was not
	// processed; the host is blocked for its Retry-After, at most the block
	// duration.
	NotReadyFailure
)

func (f Failure) String() string {
	switch f {
	case NetworkFailure:
		return "network"
	case CertificateFailure:
		return "certificate"
	case NotReadyFailure:
		return "not ready"
	default:
		return "not the host's fault"
	}
}

// Phase is how far an attempt got with its host.
type Phase int

const (
	// BeforeConnecting: the attempt failed before it asked for a connection
	// (a malformed request); no host was involved.
	BeforeConnecting Phase = iota
	// Connecting: a connection was asked for and never obtained (dial, TLS
	// handshake, proxy). Whatever failed, it failed on the way to this host.
	Connecting
	// Connected: the request was written to a connection; the server may
	// have seen it.
	Connected
)

// Classify tells what err, returned by a transport for a request whose own
// context has not ended, says about the host. Any error while Connecting is
// the host's (a host that speaks plain HTTP fails the TLS handshake with a
// tls.RecordHeaderError, for one); after that only errors known to come from
// the network or from a certificate are.
func Classify(err error, phase Phase) Failure {
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
	var unanswered *UnansweredError
	if errors.As(err, &unanswered) {
		return NetworkFailure
	}
	if errors.Is(err, context.Canceled) {
		return NotHostFailure
	}
	if phase == Connecting {
		return NetworkFailure
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
	for _, s := range []string{"http2: client connection lost", "http2: client connection force closed", "connection reset by peer", "broken pipe", "use of closed network connection", "http2: server sent GOAWAY", "http2: response body closed"} {
		if strings.Contains(msg, s) {
			return NetworkFailure
		}
	}
	return NotHostFailure
}

// ClassifyResponse tells what a response to a request for path says about
// the host that sent it: NotReadyFailure, with how long to leave the host
// out, for a KEP-3028 refusal (503 with X-Kubernetes-Ready: false,
// guaranteed unprocessed); NotHostFailure for every other answer, which
// client-go's own retry handles. An answer relayed through a proxy
// subresource is the backend's, whatever its headers say: taken for the
// server's refusal, it would send a write on to another server although the
// backend may have acted on it.
func ClassifyResponse(path string, status int, h http.Header) (Failure, time.Duration) {
	if status != http.StatusServiceUnavailable || ifready.AnswerFromHeader(h) != ifready.Initializing || !MayLearnFrom(path) {
		return NotHostFailure, 0
	}
	wait := time.Second
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		wait = time.Duration(s) * time.Second
	}
	return NotReadyFailure, wait
}

// shutdownMessage opens the body of the 429 an API server sends, while it
// shuts down, to every request it no longer takes (k8s.io/apiserver's
// WithRetryAfter): the request was not processed.
const shutdownMessage = "The apiserver is shutting down"

// ShuttingDown tells whether an answer to a request for path is an API
// server's refusal while it shuts down (429, Retry-After, and a plain-text
// body that opens with shutdownMessage), and how long to leave the host out.
// Like a KEP-3028 refusal it was not processed, so the request goes on to
// another server at once: client-go alone would wait the 5 s it asks for and
// then maybe reach the same server. The 429s of overload (max-inflight,
// priority and fairness) carry another text and stay the caller's. bodyStart
// is the body's first bytes.
func ShuttingDown(path string, status int, h http.Header, bodyStart []byte) (bool, time.Duration) {
	if status != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !MayLearnFrom(path) ||
		!strings.HasPrefix(h.Get("Content-Type"), "text/plain") || !bytes.HasPrefix(bodyStart, []byte(shutdownMessage)) {
		return false, 0
	}
	wait := time.Second
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		wait = time.Duration(s) * time.Second
	}
	return true, wait
}

// AttemptPhase is how far an attempt got, from the phase its trace saw
// and the error it ended with. An attempt whose last step was a dial that
// failed reached no server, whatever the trace saw: the HTTP/2 transport
// sends a request again on a new connection only when the server said it
// did not process it (a GOAWAY past its stream, a refused stream), and
// net/http only when nothing of it was written, unless the request is one
// it may replay (replayable: see transportMayReplay). That is how a write
// meets a server's graceful shutdown: the server's GOAWAY turns it away,
// and the new connection is refused. It is then not a write whose outcome
// is unknown, but one to send to the next server.
func AttemptPhase(traced Phase, err error, replayable bool) Phase {
	var op *net.OpError
	if traced == Connected && !replayable && err != nil && errors.As(err, &op) && op.Op == "dial" {
		return Connecting
	}
	return traced
}

// transportMayReplay tells whether net/http may send req again on a new
// connection after the server may have read it (its isReplayable): a safe
// method, or one with an Idempotency-Key header.
func transportMayReplay(req *http.Request) bool {
	return safeMethod(req.Method) || req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// MayResend reports whether a request that failed on one host may be sent to
// another. A request that never got a connection reached no server and may
// always be resent, and so may one the server refused as not ready (KEP-3028
// guarantees it was not processed); once a connection was made otherwise, the
// server may have acted on it, so only methods that are safe to repeat are
// resent. A body that cannot be produced again (an opaque reader) is never
// resent.
func MayResend(method string, connected, bodyReplayable bool) bool {
	if !bodyReplayable {
		return false
	}
	if !connected {
		return true
	}
	return safeMethod(method)
}

// MayLearnFrom reports whether the headers of a response to path (Alt-Svc,
// X-Kubernetes-Ready) may be believed: only an API server's own answers
// count, never one relayed from a pod, service or node through a proxy
// subresource, where the backend chooses the headers.
func MayLearnFrom(path string) bool {
	for path != "" {
		var seg string
		seg, path, _ = strings.Cut(path, "/")
		if seg == "proxy" {
			return false
		}
	}
	return true
}

// bodyReplayable reports whether req's body can be produced again.
func bodyReplayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}
