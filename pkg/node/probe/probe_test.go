package probe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
		{"grpc", corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 1}}, false, "not supported"},
		{"none", corev1.ProbeHandler{}, false, "no handler"},
	}
	for _, tt := range tests {
		ok, msg := Run(context.Background(), &corev1.Probe{ProbeHandler: tt.probe, TimeoutSeconds: 1}, "127.0.0.1", c, nil)
		if ok != tt.ok || !strings.Contains(msg, tt.wantMsg) {
			t.Errorf("%s: Run = %v %q, want %v %q", tt.name, ok, msg, tt.ok, tt.wantMsg)
		}
	}
}
