package altsvc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
		{"server order, original last as fallback", OrderInput{Original: orig, Candidates: []string{a, b}}, []string{a, b, orig}},
		{"original preferred when listed", OrderInput{Original: b, Candidates: []string{a, b, c}}, []string{b, a, c}},
		{"local preferred over the original", OrderInput{Original: b, Candidates: []string{a, b, loc}, Local: local}, []string{loc, b, a}},
		{"stick to the current host", OrderInput{Original: b, Current: c, Candidates: []string{a, b, c, loc}, Local: local}, []string{c, loc, b, a}},
		{"current blocked: choose again", OrderInput{Original: b, Current: c, Candidates: []string{a, b, c}, Blocked: blocked(c)}, []string{b, a}},
		{"blocked hosts left out", OrderInput{Original: orig, Candidates: []string{a, b, c}, Blocked: blocked(a, c)}, []string{b, orig}},
		{"all blocked: fall back to the original", OrderInput{Original: orig, Candidates: []string{a, b}, Blocked: blocked(a, b)}, []string{orig}},
		{"original blocked but listed: still the fallback", OrderInput{Original: a, Candidates: []string{a, b}, Blocked: blocked(a, b)}, []string{a}},
		{"duplicates and empty entries dropped", OrderInput{Original: orig, Candidates: []string{a, "", a, b}}, []string{a, b, orig}},
		{"current not a candidate any more", OrderInput{Original: orig, Current: c, Candidates: []string{a, b}}, []string{a, b, orig}},
		{"last resort after the original", OrderInput{Original: orig, Candidates: []string{a, b, c}, Blocked: blocked(a, b), LastResort: []string{b, a}}, []string{c, orig, b, a}},
		{"last resort not repeated", OrderInput{Original: a, Candidates: []string{a, b}, Blocked: blocked(a, b), LastResort: []string{a, b}}, []string{a, b}},
		{"local and original the same host", OrderInput{Original: loc, Candidates: []string{a, loc}, Local: local}, []string{loc, a}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Order(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Order = %v, want %v", got, tt.want)
			}
		})
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
		name string
		err  error
		want Failure
	}{
		{"nil", nil, NotHostFailure},
		{"connection refused", dialErr(syscall.ECONNREFUSED), NetworkFailure},
		{"no route", dialErr(syscall.EHOSTUNREACH), NetworkFailure},
		{"network unreachable", dialErr(syscall.ENETUNREACH), NetworkFailure},
		{"connection reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, NetworkFailure},
		{"broken pipe", &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, NetworkFailure},
		{"real dial timeout", realTimeout, NetworkFailure},
		{"EOF", io.EOF, NetworkFailure},
		{"unexpected EOF wrapped", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), NetworkFailure},
		{"closed connection", net.ErrClosed, NetworkFailure},
		{"deadline", os.ErrDeadlineExceeded, NetworkFailure},
		{"dial deadline from our timeout", context.DeadlineExceeded, NetworkFailure},
		{"GOAWAY", http2.GoAwayError{ErrCode: http2.ErrCodeNo}, NetworkFailure},
		{"h2 health check", errors.New("http2: client connection lost"), NetworkFailure},
		{"h2 GOAWAY text", errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1"), NetworkFailure},
		{"unknown authority", fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}), CertificateFailure},
		{"wrong host name", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "kubernetes.default"}, CertificateFailure},
		{"expired", x509.CertificateInvalidError{Reason: x509.Expired}, CertificateFailure},
		{"tls verification", &tls.CertificateVerificationError{Err: errors.New("bad")}, CertificateFailure},
		{"caller canceled", context.Canceled, NotHostFailure},
		{"malformed request", errors.New("net/http: invalid header field value"), NotHostFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
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
