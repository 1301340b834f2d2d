package lbgate

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
		case "/moved":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	pod := func(ip string, ann map[string]string, ports ...int32) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Status: corev1.PodStatus{PodIP: ip}}
		c := corev1.Container{Name: "c"}
		for _, n := range ports {
			c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: n})
		}
		p.Spec.Containers = []corev1.Container{c}
		return p
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		status  corev1.ConditionStatus
		reason  string
		message string
	}{
		{"healthy", pod(host, map[string]string{PortAnnotation: port, PathAnnotation: "/healthz"}), corev1.ConditionTrue, ReasonHealthy, "status 200"},
		{"path without slash", pod(host, map[string]string{PortAnnotation: port, PathAnnotation: "healthz"}), corev1.ConditionTrue, ReasonHealthy, "/healthz"},
		{"redirect counts as healthy", pod(host, map[string]string{PortAnnotation: port, PathAnnotation: "/moved"}), corev1.ConditionTrue, ReasonHealthy, "status 302"},
		{"503", pod(host, map[string]string{PortAnnotation: port, PathAnnotation: "/down"}), corev1.ConditionFalse, ReasonUnhealthy, "status 503"},
		{"no IP", pod("", nil), corev1.ConditionFalse, ReasonNotYetAssigned, "no IP"},
		{"bad port annotation", pod(host, map[string]string{PortAnnotation: "http"}), corev1.ConditionFalse, ReasonNoTarget, "is not a port"},
		{"no port at all", pod(host, nil), corev1.ConditionFalse, ReasonNoTarget, "no port"},
		{"containerPort used, refused", pod(host, nil, 1), corev1.ConditionFalse, ReasonUnhealthy, "connection refused"},
	}
	for _, tt := range tests {
		r := Check(context.Background(), HTTPClient(), tt.pod)
		if r.Status != tt.status || r.Reason != tt.reason || !strings.Contains(r.Message, tt.message) {
			t.Errorf("%s: %+v, want %s %s %q", tt.name, r, tt.status, tt.reason, tt.message)
		}
	}
}
