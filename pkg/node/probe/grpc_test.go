package probe

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// TestGRPCProbe probes a real gRPC health server on 127.0.0.1, as the
// kubelet does: a serving service passes, a not-serving one and a port
// nothing listens on fail with a reason.
func TestGRPCProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	port := int32(l.Addr().(*net.TCPAddr).Port)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := int32(dead.Addr().(*net.TCPAddr).Port)
	dead.Close()

	for _, tc := range []struct {
		name    string
		action  *corev1.GRPCAction
		ok      bool
		message string
	}{
		{"serving", &corev1.GRPCAction{Port: port}, true, ""},
		{"a named service not serving", &corev1.GRPCAction{Port: port, Service: ptr.To("down")}, false, "NOT_SERVING"},
		{"nothing listens", &corev1.GRPCAction{Port: deadPort}, false, "failed to connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: tc.action}, TimeoutSeconds: 2}
			ok, msg := Run(context.Background(), p, "127.0.0.1", &corev1.Container{Name: "c"}, nil)
			if ok != tc.ok || !strings.Contains(msg, tc.message) {
				t.Errorf("got %v %q, want %v with %q", ok, msg, tc.ok, tc.message)
			}
		})
	}
}
