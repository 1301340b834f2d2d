package allocation

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func resources(pairs ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(pairs); i += 2 {
		l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return l
}

func TestAdmit(t *testing.T) {
	node := resources("cpu", "2", "memory", "1Gi", "pods", "3")
	mk := func(name, cpu string, ports ...corev1.ContainerPort) *corev1.Pod {
		c := corev1.Container{Name: "c", Ports: ports}
		if cpu != "" {
			c.Resources.Requests = resources("cpu", cpu)
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	}
	port := func(ip string, proto corev1.Protocol, p int32) corev1.ContainerPort {
		return corev1.ContainerPort{HostIP: ip, Protocol: proto, HostPort: p, ContainerPort: p}
	}
	web := mk("web", "", port("", "", 8080))
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		others  []*corev1.Pod
		reason  string
		message string
	}{
		{"fits", mk("new", "500m"), []*corev1.Pod{mk("a", "1")}, "", ""},
		{"the same host port", mk("new", "", port("", corev1.ProtocolTCP, 8080)), []*corev1.Pod{web}, ReasonNodePorts,
			"Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"},
		{"the same port on one address against every address", mk("new", "", port("127.0.0.1", corev1.ProtocolTCP, 8080)), []*corev1.Pod{web}, ReasonNodePorts, ""},
		{"another protocol", mk("new", "", port("", corev1.ProtocolUDP, 8080)), []*corev1.Pod{web}, "", ""},
		{"other addresses", mk("new", "", port("10.0.0.1", "", 9000)), []*corev1.Pod{mk("o", "", port("10.0.0.2", "", 9000))}, "", ""},
		{"too much cpu", mk("new", "1500m"), []*corev1.Pod{mk("a", "1")}, "OutOfcpu",
			"Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"},
		{"no room for a pod", mk("new", ""), []*corev1.Pod{mk("a", ""), mk("b", ""), mk("c", "")}, "OutOfpods",
			"Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, message := Admit(tc.pod, tc.others, node)
			if reason != tc.reason || (tc.message != "" && message != tc.message) {
				t.Errorf("got %q %q, want %q %q", reason, message, tc.reason, tc.message)
			}
		})
	}
}

func TestResize(t *testing.T) {
	node := resources("cpu", "2", "memory", "4Gi", "pods", "110")
	for _, tc := range []struct {
		name             string
		requests, others corev1.ResourceList
		reason, message  string
	}{
		{"fits", resources("cpu", "500m", "memory", "1Gi"), resources("cpu", "1", "memory", "1Gi"), "", ""},
		{"fits exactly", resources("cpu", "1", "memory", "3Gi"), resources("cpu", "1", "memory", "1Gi"), "", ""},
		{"no requests", corev1.ResourceList{}, resources("cpu", "2"), "", ""},
		{"more CPU than the node has: never fits", resources("cpu", "3"), nil, corev1.PodReasonInfeasible,
			"Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000"},
		{"more memory than the node has", resources("memory", "5Gi"), nil, corev1.PodReasonInfeasible,
			"Node didn't have enough capacity: memory, requested: 5368709120, capacity: 4294967296"},
		{"others leave too little: may fit later", resources("cpu", "1500m"), resources("cpu", "1"), corev1.PodReasonDeferred,
			"Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, message := Resize(tc.requests, node, tc.others)
			if reason != tc.reason || message != tc.message {
				t.Errorf("got %q %q, want %q %q", reason, message, tc.reason, tc.message)
			}
		})
	}
}
