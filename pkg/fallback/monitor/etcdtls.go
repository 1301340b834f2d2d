package monitor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
		tc := tls.Client(conn, c)
		err = tc.HandshakeContext(dctx)
		cancel()
		tc.Close()
		if err == nil {
			return "" // one member accepts them
		}
		refused = append(refused, fmt.Sprintf("%s: %v", u.Host, err))
	}
	return strings.Join(refused, "; ")
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
