package agent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestAdmissionVerdict(t *testing.T) {
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
			reason, message := admissionVerdict(tc.pod, tc.others, node)
			if reason != tc.reason || (tc.message != "" && message != tc.message) {
				t.Errorf("got %q %q, want %q %q", reason, message, tc.reason, tc.message)
			}
		})
	}
}

// TestActivePodsCountAllocated: a pod counts for others with the resources
// allocated to it, not with a resize of it that still waits.
func TestActivePodsCountAllocated(t *testing.T) {
	admitted := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "c", Resources: corev1.ResourceRequirements{Requests: resources("cpu", "1")}}}}}
	waiting := admitted.DeepCopy()
	waiting.Spec.Containers[0].Resources.Requests = resources("cpu", "3")
	a := &Agent{workers: map[string]*worker{"ns/p": {pod: waiting, allocated: admitted}}}
	if got := podsRequests(a.activePodsLocked("other")); got.Cpu().String() != "1" {
		t.Errorf("others count cpu %s of a pod allocated 1 with a resize to 3 waiting, want 1", got.Cpu())
	}
	if got := a.activePodsLocked("uid-p"); len(got) != 0 {
		t.Errorf("the pod itself counted: %d pods", len(got))
	}
}
