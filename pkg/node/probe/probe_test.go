package probe

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/steadyplane/steadyplane/internal/testproc"
)

func TestTracker(t *testing.T) {
	p := &corev1.Probe{SuccessThreshold: 2, FailureThreshold: 2}
	tests := []struct {
		kind    Kind
		results []bool
		want    []bool // verdict after each result
	}{
		{Readiness, []bool{true, true, false, false, true}, []bool{false, true, true, false, false}},
		{Liveness, []bool{false, true, false, false}, []bool{true, true, true, false}},
		{Startup, []bool{false, true, true}, []bool{false, false, true}},
	}
	for _, tt := range tests {
		tr := NewTracker(tt.kind)
		for i, r := range tt.results {
			tr.Observe(p, r)
			if tr.Passing() != tt.want[i] {
				t.Errorf("%s after results %v: passing %v, want %v", tt.kind, tt.results[:i+1], tr.Passing(), tt.want[i])
			}
		}
	}
	// Defaults: 1 success, 3 failures.
	tr := NewTracker(Readiness)
	if !tr.Observe(&corev1.Probe{}, true) || !tr.Passing() {
		t.Error("one success with the default threshold should pass")
	}
	tr.Observe(&corev1.Probe{}, false)
	tr.Observe(&corev1.Probe{}, false)
	if !tr.Passing() {
		t.Error("two failures should not fail with the default threshold of 3")
	}
	if !tr.Observe(&corev1.Probe{}, false) || tr.Passing() {
		t.Error("the third failure should fail")
	}
}

func TestRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port := intstr.Parse(portStr)
	c := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: port.IntVal}}}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := intstr.FromInt32(int32(l.Addr().(*net.TCPAddr).Port))
	l.Close()
	tests := []struct {
		name    string
		probe   corev1.ProbeHandler
		ok      bool
		wantMsg string
	}{
		{"http ok", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: port}}, true, ""},
		{"http named port", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "ok", Port: intstr.FromString("web")}}, true, ""},
		{"http 503", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/bad", Port: port}}, false, "statuscode: 503"},
		{"http refused", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: dead}}, false, "connection refused"},
		{"unknown named port", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("nope")}}, false, "not a number nor a named port"},
		{"tcp ok", corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: port}}, true, ""},
		{"tcp refused", corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: dead}}, false, "connection refused"},
		{"exec ok", corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, true, ""},
		{"exec fails", corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo nope; exit 3"}}}, false, "exit status 3: nope"},
		{"exec times out", corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "5"}}}, false, "timed out"},
		{"none", corev1.ProbeHandler{}, false, "no handler"},
	}
	for _, tt := range tests {
		ok, msg := Run(context.Background(), &corev1.Probe{ProbeHandler: tt.probe, TimeoutSeconds: 1}, "127.0.0.1", c, hostCommand)
		if ok != tt.ok || !strings.Contains(msg, tt.wantMsg) {
			t.Errorf("%s: Run = %v %q, want %v %q", tt.name, ok, msg, tt.ok, tt.wantMsg)
		}
	}
}

// TestExecProbeIsBounded: an exec probe ends within its timeout with what
// it started, keeps at most 10 KiB of output, and does not wait for a child
// that holds its output open.
func TestExecProbeIsBounded(t *testing.T) {
	dir := t.TempDir()
	t.Run("timeout ends the whole group", func(t *testing.T) {
		childFile := filepath.Join(dir, "child")
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		ok, msg := runExec(ctx, []string{"sh", "-c", "sleep 30 & echo $! > " + childFile + "; sleep 30"}, hostCommand, 300*time.Millisecond)
		if ok || !strings.Contains(msg, "timed out") || time.Since(start) > 5*time.Second {
			t.Errorf("ok %v, %q after %v; want a timeout within seconds", ok, msg, time.Since(start))
		}
		b, _ := os.ReadFile(childFile)
		var child int
		fmt.Sscanf(string(b), "%d", &child)
		deadline := time.Now().Add(3 * time.Second)
		for child > 0 && testproc.Alive(child) {
			if time.Now().After(deadline) {
				syscall.Kill(child, syscall.SIGKILL)
				t.Fatalf("the probe's child %d survived the timeout", child)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("a child holding the output does not hold the probe", func(t *testing.T) {
		start := time.Now()
		ok, msg := runExec(context.Background(), []string{"sh", "-c", "sleep 30 & exit 0"}, hostCommand, 10*time.Second)
		if !ok || time.Since(start) > 4*time.Second {
			t.Errorf("ok %v (%s) after %v; want success within about 1s", ok, msg, time.Since(start))
		}
	})
	t.Run("output is bounded", func(t *testing.T) {
		out := &limitedBuffer{max: maxExecOutput}
		for i := 0; i < 100; i++ {
			out.Write(make([]byte, 1<<20))
		}
		if len(out.Bytes()) != maxExecOutput {
			t.Errorf("kept %d bytes, want %d", len(out.Bytes()), maxExecOutput)
		}
		ok, msg := runExec(context.Background(), []string{"sh", "-c", "head -c 50000000 /dev/zero | tr '\\\\0' x; exit 1"}, hostCommand, 10*time.Second)
		if ok || len(msg) > 400 {
			t.Errorf("ok %v, message of %d bytes", ok, len(msg))
		}
	})
}

func hostCommand(argv []string) *exec.Cmd { return exec.Command(argv[0], argv[1:]...) }

// BenchmarkHTTPProbe is one HTTP probe against a server on 127.0.0.1, the
// node agent's most frequent probe: a request on a fresh connection (no
// keep-alive, as the kubelet's) through the shared client.
func BenchmarkHTTPProbe(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.Parse(portStr)}}, TimeoutSeconds: 1}
	c := &corev1.Container{Name: "c"}
	b.ReportAllocs()
	for b.Loop() {
		if ok, msg := Run(context.Background(), p, "127.0.0.1", c, hostCommand); !ok {
			b.Fatal(msg)
		}
	}
}
