package altsvcclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

func TestOrder(t *testing.T) {
	const (
		orig = "lb:6443"
		a    = "10.0.0.2:6443"
		b    = "10.0.0.3:6443"
		c    = "10.0.0.4:6443"
		loc  = "127.0.0.1:6443"
	)
	blocked := func(hs ...string) func(string) bool {
		return func(h string) bool { return contains(hs, h) }
	}
	local := func(h string) bool { return h == loc }
	tests := []struct {
		name string
		in   OrderInput
		want []string
	}{
		{"no alternatives: the original only", OrderInput{Original: orig}, []string{orig}},
		{"an unlisted original (a load balancer) first, then the listed order", OrderInput{Original: orig, Candidates: []string{a, b}}, []string{orig, a, b}},
		{"original preferred when listed", OrderInput{Original: b, Candidates: []string{a, b, c}}, []string{b, a, c}},
		{"local preferred over the original", OrderInput{Original: b, Candidates: []string{a, b, loc}, Local: local}, []string{loc, b, a}},
		{"stick to the current host", OrderInput{Original: b, Current: c, Candidates: []string{a, b, c, loc}, Local: local}, []string{c, loc, b, a}},
		{"a working unlisted original is kept", OrderInput{Original: orig, Current: orig, Candidates: []string{a, b, loc}, Local: local}, []string{orig, loc, a, b}},
		{"current blocked: choose again", OrderInput{Original: b, Current: c, Candidates: []string{a, b, c}, Blocked: blocked(c)}, []string{b, a}},
		{"blocked hosts left out", OrderInput{Original: orig, Candidates: []string{a, b, c}, Blocked: blocked(a, c)}, []string{orig, b}},
		{"unlisted original blocked: the fallback after the alternatives", OrderInput{Original: orig, Candidates: []string{a, b}, Blocked: blocked(orig)}, []string{a, b, orig}},
		{"all blocked: fall back to the original", OrderInput{Original: orig, Candidates: []string{a, b}, Blocked: blocked(a, b, orig)}, []string{orig}},
		{"original blocked but listed: still the fallback", OrderInput{Original: a, Candidates: []string{a, b}, Blocked: blocked(a, b)}, []string{a}},
		{"duplicates and empty entries dropped", OrderInput{Original: orig, Candidates: []string{a, "", a, b}}, []string{orig, a, b}},
		{"current not a candidate any more", OrderInput{Original: orig, Current: c, Candidates: []string{a, b}}, []string{orig, a, b}},
		{"last resort after the original", OrderInput{Original: orig, Candidates: []string{a, b, c}, Blocked: blocked(a, b, orig), LastResort: []string{b, a}}, []string{c, orig, b, a}},
		{"last resort not repeated", OrderInput{Original: a, Candidates: []string{a, b}, Blocked: blocked(a, b), LastResort: []string{a, b}}, []string{a, b}},
		{"local and original the same host", OrderInput{Original: loc, Candidates: []string{a, loc}, Local: local}, []string{loc, a}},
		{"seed 0 keeps the listed order", OrderInput{Original: a, Candidates: []string{c, b, a}, Seed: 0}, []string{a, c, b}},
		{"a seed reorders only the plain alternatives", OrderInput{Original: a, Current: b, Candidates: []string{a, b, c, loc, "10.0.0.5:6443", "10.0.0.6:6443"}, Local: local, Seed: 7},
			append([]string{b, loc, a}, Order(OrderInput{Candidates: []string{c, "10.0.0.5:6443", "10.0.0.6:6443"}, Seed: 7})...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Order(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Order = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestOrderSpreadsClients: 300 clients with random seeds, all given the same
// list and an original that is down, pick each alternative about as often.
func TestOrderSpreadsClients(t *testing.T) {
	hosts := []string{"10.0.0.2:6443", "10.0.0.3:6443", "10.0.0.4:6443"}
	first := map[string]int{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		got := Order(OrderInput{Original: "lb:6443", Candidates: hosts, Blocked: func(h string) bool { return h == "lb:6443" }, Seed: rng.Uint64() | 1})
		first[got[0]]++
	}
	for _, h := range hosts {
		if n := first[h]; n < 70 || n > 130 {
			t.Errorf("%s first for %d of 300 clients, want about 100: %v", h, n, first)
		}
	}
}

func TestCanonicalHost(t *testing.T) {
	for _, tt := range []struct{ scheme, host, want string }{
		{"https", "lb.example", "lb.example:443"},
		{"https", "lb.example:6443", "lb.example:6443"},
		{"http", "lb.example", "lb.example:80"},
		{"https", "[fd00::1]", "[fd00::1]:443"},
		{"https", "[fd00::1]:6443", "[fd00::1]:6443"},
		{"https", "10.0.0.1", "10.0.0.1:443"},
	} {
		if got := CanonicalHost(tt.scheme, tt.host); got != tt.want {
			t.Errorf("CanonicalHost(%s, %s) = %s, want %s", tt.scheme, tt.host, got, tt.want)
		}
	}
}

func TestClassify(t *testing.T) {
	dialErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}
	}
	// A real dial timeout, to a port of this machine that does not answer
	// within a nanosecond's deadline.
	_, realTimeout := (&net.Dialer{Timeout: time.Nanosecond}).Dial("tcp", "127.0.0.1:1")
	tests := []struct {
		name  string
		err   error
		phase Phase
		want  Failure
	}{
		{"nil", nil, Connected, NotHostFailure},
		{"connection refused", dialErr(syscall.ECONNREFUSED), Connected, NetworkFailure},
		{"no route", dialErr(syscall.EHOSTUNREACH), Connected, NetworkFailure},
		{"network unreachable", dialErr(syscall.ENETUNREACH), Connected, NetworkFailure},
		{"connection reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, Connected, NetworkFailure},
		{"broken pipe", &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, Connected, NetworkFailure},
		{"real dial timeout", realTimeout, Connected, NetworkFailure},
		{"EOF", io.EOF, Connected, NetworkFailure},
		{"unexpected EOF wrapped", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), Connected, NetworkFailure},
		{"closed connection", net.ErrClosed, Connected, NetworkFailure},
		{"deadline", os.ErrDeadlineExceeded, Connected, NetworkFailure},
		{"dial deadline from our timeout", context.DeadlineExceeded, Connected, NetworkFailure},
		{"GOAWAY", http2.GoAwayError{ErrCode: http2.ErrCodeNo}, Connected, NetworkFailure},
		{"h2 health check", errors.New("http2: client connection lost"), Connected, NetworkFailure},
		{"h2 GOAWAY text", errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1"), Connected, NetworkFailure},
		{"unknown authority", fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}), Connected, CertificateFailure},
		{"wrong host name", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "kubernetes.default"}, Connected, CertificateFailure},
		{"expired", x509.CertificateInvalidError{Reason: x509.Expired}, Connected, CertificateFailure},
		{"tls verification", &tls.CertificateVerificationError{Err: errors.New("bad")}, Connected, CertificateFailure},
		{"caller canceled", context.Canceled, Connected, NotHostFailure},
		{"malformed request", errors.New("net/http: invalid header field value"), Connected, NotHostFailure},
		{"plain HTTP answering a TLS handshake", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, Connecting, NetworkFailure},
		{"unknown error while connecting", errors.New("proxyconnect tcp: something odd"), Connecting, NetworkFailure},
		{"unknown error after connecting", errors.New("proxyconnect tcp: something odd"), Connected, NotHostFailure},
		{"malformed request before connecting", errors.New("net/http: invalid header field value"), BeforeConnecting, NotHostFailure},
		{"caller canceled while connecting", context.Canceled, Connecting, NotHostFailure},
		{"certificate while connecting", x509.UnknownAuthorityError{}, Connecting, CertificateFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err, tt.phase); got != tt.want {
				t.Errorf("Classify(%v, phase %d) = %v, want %v", tt.err, tt.phase, got, tt.want)
			}
		})
	}
}

func TestClassifyResponse(t *testing.T) {
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	const pods = "/api/v1/namespaces/default/pods"
	tests := []struct {
		name   string
		path   string
		status int
		header http.Header
		want   Failure
		wait   time.Duration
	}{
		{"KEP-3028 refusal", pods, 503, h("X-Kubernetes-Ready", "false", "Retry-After", "3"), NotReadyFailure, 3 * time.Second},
		{"refusal without Retry-After waits 1s", pods, 503, h("X-Kubernetes-Ready", "false"), NotReadyFailure, time.Second},
		{"refusal with a date Retry-After waits 1s", pods, 503, h("X-Kubernetes-Ready", "false", "Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"), NotReadyFailure, time.Second},
		{"plain 503: client-go's retry decides", pods, 503, h("Retry-After", "1"), NotHostFailure, 0},
		{"503 from a ready server", pods, 503, h("X-Kubernetes-Ready", "true"), NotHostFailure, 0},
		{"429 with not ready is not a refusal", pods, 429, h("X-Kubernetes-Ready", "false"), NotHostFailure, 0},
		{"200", pods, 200, h("X-Kubernetes-Ready", "true"), NotHostFailure, 0},
		{"a pod's refusal relayed through pods/x/proxy is the pod's, not the server's", pods + "/web/proxy/submit", 503, h("X-Kubernetes-Ready", "false", "Retry-After", "3"), NotHostFailure, 0},
		{"a service's, through services/x/proxy", "/api/v1/namespaces/default/services/web:80/proxy/", 503, h("X-Kubernetes-Ready", "false"), NotHostFailure, 0},
		{"a node's, through nodes/x/proxy", "/api/v1/nodes/n1/proxy/metrics", 503, h("X-Kubernetes-Ready", "false"), NotHostFailure, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, wait := ClassifyResponse(tt.path, tt.status, tt.header)
			if f != tt.want || wait != tt.wait {
				t.Errorf("ClassifyResponse = %v, %v; want %v, %v", f, wait, tt.want, tt.wait)
			}
		})
	}
}

func TestMayLearnFrom(t *testing.T) {
	for path, want := range map[string]bool{
		"/api":                            true,
		"/api/v1/namespaces/default/pods": true,
		"/apis/apps/v1/deployments":       true,
		"/version":                        true,
		"/api/v1/namespaces/default/pods/web/proxy/":  false,
		"/api/v1/namespaces/default/pods/web/proxy":   false,
		"/api/v1/namespaces/d/services/s:80/proxy/x":  false,
		"/api/v1/nodes/n1/proxy/metrics":              false,
		"/api/v1/proxy/namespaces/default/pods/web/":  false,
		"/api/v1/namespaces/default/configmaps/proxy": false, // an object named proxy: one answer not learned from
	} {
		if got := MayLearnFrom(path); got != want {
			t.Errorf("MayLearnFrom(%s) = %v, want %v", path, got, want)
		}
	}
}

func TestMayResend(t *testing.T) {
	tests := []struct {
		method                string
		connected, replayable bool
		want                  bool
	}{
		{http.MethodGet, false, true, true},
		{http.MethodPost, false, true, true},
		{http.MethodPatch, false, true, true},
		{http.MethodDelete, false, true, true},
		{http.MethodGet, true, true, true},
		{http.MethodHead, true, true, true},
		{http.MethodOptions, true, true, true},
		{http.MethodPost, true, true, false},
		{http.MethodPut, true, true, false},
		{http.MethodPatch, true, true, false},
		{http.MethodDelete, true, true, false},
		{http.MethodPost, false, false, false},
		{http.MethodGet, true, false, false},
	}
	for _, tt := range tests {
		if got := MayResend(tt.method, tt.connected, tt.replayable); got != tt.want {
			t.Errorf("MayResend(%s, connected=%v, replayable=%v) = %v, want %v", tt.method, tt.connected, tt.replayable, got, tt.want)
		}
	}
}

func TestShuttingDown(t *testing.T) {
	const pods = "/api/v1/namespaces/default/pods"
	text := http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "Retry-After": {"5"}}
	shutdown := []byte("The apiserver is shutting down, please try again later.\n")
	overload := []byte("Too many requests, please try again later.\n")
	noRetryAfter := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
	jsonType := http.Header{"Content-Type": {"application/json"}, "Retry-After": {"5"}}
	tests := []struct {
		name   string
		path   string
		status int
		header http.Header
		body   []byte
		want   bool
		wait   time.Duration
	}{
		{"the shutdown refusal", pods, 429, text, shutdown, true, 5 * time.Second},
		{"overload (max-inflight, priority and fairness) is the caller's", pods, 429, text, overload, false, 0},
		{"no Retry-After", pods, 429, noRetryAfter, shutdown, false, 0},
		{"a JSON Status is not the filter's", pods, 429, jsonType, shutdown, false, 0},
		{"another status", pods, 503, text, shutdown, false, 0},
		{"relayed from a pod", pods + "/web/proxy/", 429, text, shutdown, false, 0},
		{"a body cut short", pods, 429, text, shutdown[:10], false, 0},
	}
	for _, tt := range tests {
		got, wait := ShuttingDown(tt.path, tt.status, tt.header, tt.body)
		if got != tt.want || wait != tt.wait {
			t.Errorf("%s: %v %v, want %v %v", tt.name, got, wait, tt.want, tt.wait)
		}
	}
}

func TestAttemptPhase(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		name       string
		traced     Phase
		err        error
		replayable bool
		want       Phase
	}{
		{"an answer keeps the traced phase", Connected, nil, false, Connected},
		{"a dial refused after a GOAWAY reached no server", Connected, &url.Error{Op: "Post", URL: "https://a", Err: refused}, false, Connecting},
		{"unless net/http may have replayed it after the server read it", Connected, refused, true, Connected},
		{"a reset on the connection did", Connected, reset, false, Connected},
		{"a dial refused before any connection", Connecting, refused, false, Connecting},
		{"an error before connecting", BeforeConnecting, errors.New("malformed"), false, BeforeConnecting},
	} {
		if got := AttemptPhase(tc.traced, tc.err, tc.replayable); got != tc.want {
			t.Errorf("%s: AttemptPhase(%v, %v, replayable=%v) = %v, want %v", tc.name, tc.traced, tc.err, tc.replayable, got, tc.want)
		}
	}
}
