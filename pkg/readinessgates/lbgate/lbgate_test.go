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
	// The test server listens on loopback: here that is the pod network.
	_, loopback, _ := net.ParseCIDR("127.0.0.0/8")
	_, other, _ := net.ParseCIDR("10.244.0.0/24")
	tests = append(tests, struct {
		name    string
		pod     *corev1.Pod
		status  corev1.ConditionStatus
		reason  string
		message string
	}{"outside the pod network: not dialled", pod("192.0.2.7", map[string]string{PortAnnotation: "80"}), corev1.ConditionFalse, ReasonOutsidePodNetwork, "outside the cluster's pod network"})
	for _, tt := range tests {
		r := Check(context.Background(), HTTPClient(), tt.pod, []*net.IPNet{other, loopback})
		if r.Status != tt.status || r.Reason != tt.reason || !strings.Contains(r.Message, tt.message) {
			t.Errorf("%s: %+v, want %s %s %q", tt.name, r, tt.status, tt.reason, tt.message)
		}
	}
}

func TestAllowed(t *testing.T) {
	_, podNet, _ := net.ParseCIDR("10.244.0.0/24")
	for _, tt := range []struct {
		name        string
		podIP       string
		hostIP      string
		hostNetwork bool
		allowed     bool
	}{
		{"in the pod range", "10.244.0.7", "127.0.0.1", false, true},
		{"outside the pod range", "10.0.0.1", "127.0.0.1", false, false},
		{"the metadata service", "169.254.169.254", "127.0.0.1", false, false},
		{"hostNetwork on its node's address", "127.0.0.1", "127.0.0.1", true, true},
		{"hostNetwork claiming another address", "192.0.2.1", "127.0.0.1", true, false},
		{"not hostNetwork, on the node's address", "127.0.0.1", "127.0.0.1", false, false},
		{"no address", "nonsense", "127.0.0.1", false, false},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: tt.hostNetwork}, Status: corev1.PodStatus{PodIP: tt.podIP, HostIP: tt.hostIP}}
		if err := Allowed(pod, []*net.IPNet{podNet}); (err == nil) != tt.allowed {
			t.Errorf("%s: Allowed = %v, want allowed %v", tt.name, err, tt.allowed)
		}
	}
}
