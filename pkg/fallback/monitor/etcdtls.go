package monitor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// EtcdTLS tells why etcd refuses the TLS of an operand's etcd client
// settings, or "" when it accepts them or nothing can be known.
type EtcdTLS interface {
	Refused(ctx context.Context, pod *corev1.Pod) string
}

// etcdTLSAfter is how long a revision may wait for etcd before the monitor
// tries its etcd settings itself: the API server dials at once.
const etcdTLSAfter = 2 * time.Second

// EtcdDialer tries the operand's --etcd-servers with its --etcd-cafile,
// --etcd-certfile and --etcd-keyfile, as its API server does. A handshake
// that fails is the revision's settings' fault; a server that does not
// answer, or files this monitor cannot read, tell nothing.
type EtcdDialer struct {
	// Timeout bounds each dial; zero means 2s.
	Timeout time.Duration
}

// Refused implements EtcdTLS.
func (d EtcdDialer) Refused(ctx context.Context, pod *corev1.Pod) string {
	args := operandArgs(pod)
	cfg, ok := etcdClientTLS(args)
	if !ok {
		return ""
	}
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	var refused []string
	for _, s := range strings.Split(args["--etcd-servers"], ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Scheme != "https" || u.Host == "" {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, timeout)
		conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", u.Host)
		if err != nil {
			cancel()
			continue // etcd down or away: not the revision's settings
		}
		c := cfg.Clone()
		c.ServerName = u.Hostname()
		err = tryTLS(dctx, tls.Client(conn, c), u.Host)
		cancel()
		switch {
		case err == nil:
			return "" // one member accepts them
		case tlsRefusal(err):
			refused = append(refused, fmt.Sprintf("%s: %v", u.Host, err))
		}
		// Anything else (a timeout, an EOF while etcd restarts) tells
		// nothing about the settings.
	}
	return strings.Join(refused, "; ")
}

// tryTLS completes a handshake and one request on tc: with TLS 1.3 the
// client's handshake ends before the server has checked its certificate,
// and a refusal comes as an alert on the first read.
func tryTLS(ctx context.Context, tc *tls.Conn, host string) error {
	defer tc.Close()
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = tc.SetDeadline(deadline)
	}
	if _, err := fmt.Fprintf(tc, "GET /health HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		return err
	}
	_, err := tc.Read(make([]byte, 1))
	return err
}

// tlsRefusal says whether err is the TLS settings' fault: a certificate
// that does not verify, or an alert from the server.
func tlsRefusal(err error) bool {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var hostname x509.HostnameError
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	return errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) || errors.As(err, &alert) || errors.As(err, &verify) ||
		strings.Contains(err.Error(), "remote error: tls:")
}

// etcdClientTLS is the TLS configuration the operand's etcd flags make;
// false when they name no CA or the files cannot be read here.
func etcdClientTLS(args map[string]string) (*tls.Config, bool) {
	caPEM, err := os.ReadFile(args["--etcd-cafile"])
	if err != nil {
		return nil, false
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, false
	}
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if args["--etcd-certfile"] != "" {
		pair, err := tls.LoadX509KeyPair(args["--etcd-certfile"], args["--etcd-keyfile"])
		if err != nil {
			return nil, false
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, true
}

// operandArgs are the operand's --flag=value arguments, the last of each
// winning (as the API server's own flag parsing).
func operandArgs(pod *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, c := range pod.Spec.Containers {
		for _, arg := range append(append([]string{}, c.Command...), c.Args...) {
			if k, v, ok := strings.Cut(arg, "="); ok && strings.HasPrefix(k, "--") {
				out[k] = v
			}
		}
	}
	return out
}
