// Package probe runs the Pod API's container probes (exec, httpGet,
// tcpSocket, grpc) for the node agent, and tracks their results against the
// probe's thresholds as the kubelet does; and the containers' lifecycle hooks
// (postStart, preStop), which run the same kinds of handlers.
package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	upstreamprobe "k8s.io/kubernetes/pkg/probe"
	grpcprobe "k8s.io/kubernetes/pkg/probe/grpc"
	httpprobe "k8s.io/kubernetes/pkg/probe/http"
)

// maxExecOutput is how much of an exec probe's output is kept, as the
// kubelet's 10 KiB.
const maxExecOutput = 10 << 10

// runExec runs an exec probe's command (see execIn) and says how it failed.
func runExec(ctx context.Context, command []string, commandFor CommandFunc, timeout time.Duration) (bool, string) {
	out, err := execIn(ctx, command, commandFor)
	if ctx.Err() != nil {
		return false, fmt.Sprintf("command timed out after %v", timeout)
	}
	if err != nil {
		return false, fmt.Sprintf("command %q failed: %v: %s", strings.Join(command, " "), err, truncate(out))
	}
	return true, ""
}

// httpClient is the client of HTTP probes and hooks, one for all of them (a
// transport per request cost its allocations at every probe). Like the
// kubelet's, it does not verify an https server's certificate: it asks
// whether the container answers, not who it is; it keeps no connection
// open between probes and does not follow redirects.
var httpClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}, //nolint:gosec
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// execIn runs command in the container in a process group of its own, so
// that the end of ctx ends everything it started, with its output kept to
// maxExecOutput and a bounded wait for children that hold its output open.
func execIn(ctx context.Context, command []string, commandFor CommandFunc) ([]byte, error) {
	cmd := commandFor(command)
	out := &limitedBuffer{max: maxExecOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	err := cmd.Start()
	if err == nil {
		stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		err = cmd.Wait()
		stop()
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // it exited 0; a child it left held its output open
	}
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it left behind
	}
	return out.Bytes(), err
}

// limitedBuffer keeps the first max bytes written to it and drops the rest,
// without failing the writer.
type limitedBuffer struct {
	max int
	b   []byte
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Bytes returns what was kept.
func (l *limitedBuffer) Bytes() []byte { return l.b }

// CommandFunc returns a command that runs argv in the container (the
// runtime's), for exec probes.
type CommandFunc func(argv []string) *exec.Cmd

// Run runs p once against a container whose pod has address host, and
// reports success with a message for failures. Exec probes run through
// commandFor.
func Run(ctx context.Context, p *corev1.Probe, host string, c *corev1.Container, commandFor CommandFunc) (bool, string) {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.Exec != nil:
		if len(p.Exec.Command) == 0 {
			return false, "exec probe without a command"
		}
		return runExec(ctx, p.Exec.Command, commandFor, timeout)
	case p.HTTPGet != nil:
		req, err := httpRequest(p.HTTPGet, c, host, "probe")
		if err != nil {
			return false, err.Error()
		}
		resp, err := httpClient.Do(req.WithContext(ctx))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
		if resp.StatusCode >= 200 && resp.StatusCode < 400 {
			return true, ""
		}
		return false, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, c)
		if err != nil {
			return false, err.Error()
		}
		h := host
		if p.TCPSocket.Host != "" {
			h = p.TCPSocket.Host
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(h, strconv.Itoa(port)))
		if err != nil {
			return false, fmt.Sprintf("dial tcp %s: %v", net.JoinHostPort(h, strconv.Itoa(port)), err)
		}
		conn.Close()
		return true, ""
	case p.GRPC != nil:
		// The kubelet's own gRPC prober: the standard health-checking
		// protocol, without TLS, at the pod's address.
		service := ""
		if p.GRPC.Service != nil {
			service = *p.GRPC.Service
		}
		result, msg, err := grpcprobe.New().Probe(host, service, int(p.GRPC.Port), timeout)
		if err != nil {
			return false, err.Error()
		}
		return result == upstreamprobe.Success || result == upstreamprobe.Warning, msg
	}
	return false, "probe has no handler"
}

// httpRequest is the kubelet's request for an HTTP probe or hook (its URL,
// headers and User-Agent kube-<agent>/<version>), after a check of the port
// that names what is wrong with it.
func httpRequest(get *corev1.HTTPGetAction, c *corev1.Container, host, agent string) (*http.Request, error) {
	if _, err := resolvePort(get.Port, c); err != nil {
		return nil, err
	}
	return httpprobe.NewRequestForHTTPGetAction(get, c, host, agent)
}

func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal < 1 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port %d", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n < 65536 {
		return n, nil
	}
	return 0, fmt.Errorf("port %q is not a number nor a named port of container %s", p.StrVal, c.Name)
}

func truncate(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// Kind is what a probe decides: readiness, liveness or startup.
type Kind string

// The three probe kinds.
const (
	Readiness Kind = "Readiness"
	Liveness  Kind = "Liveness"
	Startup   Kind = "Startup"
)

// Tracker turns single probe results into the probe's verdict, with the Pod
// API's thresholds: successThreshold results in a row to pass (default 1),
// failureThreshold in a row to fail (default 3). Readiness and startup start
// failed, liveness starts passed, as in the kubelet.
type Tracker struct {
	passing         bool
	successes, errs int32
}

// NewTracker returns a tracker in the initial state for kind.
func NewTracker(kind Kind) *Tracker { return &Tracker{passing: kind == Liveness} }

// Resume sets the verdict a previous node agent reached on the same run,
// which this one adopted; the thresholds count from there. The kubelet
// keeps a ready container ready across its restarts the same way.
func (t *Tracker) Resume(passing bool) { t.passing = passing }

// Passing is the current verdict.
func (t *Tracker) Passing() bool { return t.passing }

// Observe records one result and reports whether the verdict changed.
func (t *Tracker) Observe(p *corev1.Probe, ok bool) bool {
	success, failure := p.SuccessThreshold, p.FailureThreshold
	if success <= 0 {
		success = 1
	}
	if failure <= 0 {
		failure = 3
	}
	before := t.passing
	if ok {
		t.successes++
		t.errs = 0
		if t.successes >= success {
			t.passing = true
		}
	} else {
		t.errs++
		t.successes = 0
		if t.errs >= failure {
			t.passing = false
		}
	}
	return before != t.passing
}

// Period returns the probe's period (default 10s).
func Period(p *corev1.Probe) time.Duration {
	if p.PeriodSeconds <= 0 {
		return 10 * time.Second
	}
	return time.Duration(p.PeriodSeconds) * time.Second
}
