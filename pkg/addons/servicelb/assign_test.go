package servicelb

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

var epoch = time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)

func node(name, ip string, ready bool, lbls ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for _, l := range lbls {
		k, v, _ := strings.Cut(l, "=")
		n.Labels[k] = v
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}
	return n
}

// lb is a LoadBalancer Service created age seconds after epoch, with TCP
// ports.
func lb(name string, age int, ports ...int32) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Second))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}}}
	for _, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: p, Protocol: corev1.ProtocolTCP, NodePort: 30000 + p})
	}
	return s
}

func with(s *corev1.Service, f func(*corev1.Service)) *corev1.Service { f(s); return s }

func hostPortPod(name, nodeName string, port int32) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: nodeName,
		Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{ContainerPort: 8080, HostPort: port, Protocol: corev1.ProtocolTCP}}}}}}
}

func slice(svc string, ready map[string]bool) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	for n, r := range ready {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{NodeName: ptr.To(n), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(r)}})
	}
	return sl
}

var reserved = []Reserved{
	{Port: Port{corev1.ProtocolTCP, 10250}, Holder: "the node API"},
	{Port: Port{corev1.ProtocolTCP, 6443}, Holder: "the API server", ServersOnly: true},
}

// want is a Decision's gist: the ingress IPs, the reason, and pieces of
// the message.
type want struct {
	ips     []string
	reason  string
	message []string
}

func TestAssign(t *testing.T) {
	a, b := node("a", "10.0.0.1", true), node("b", "10.0.0.2", true)
	server := node("s", "10.0.0.9", true, ServerLabel+"=")
	for _, tc := range []struct {
		name string
		in   Input
		want map[string]want
	}{
		{name: "every Ready node's address",
			in:   Input{Services: []*corev1.Service{lb("web", 0, 80)}, Nodes: []*corev1.Node{b, a}},
			want: map[string]want{"web": {ips: []string{"10.0.0.1", "10.0.0.2"}, reason: ReasonAssigned, message: []string{"on 2 nodes (a, b)"}}}},
		{name: "not Ready, excluded and unselected nodes are left out",
			in: Input{Services: []*corev1.Service{lb("web", 0, 80)}, NodeSelector: labels.SelectorFromSet(labels.Set{"lb": "yes"}),
				Nodes: []*corev1.Node{node("down", "10.0.0.3", false, "lb=yes"), node("out", "10.0.0.4", true, "lb=yes", ExcludeLabel+"="), node("other", "10.0.0.5", true), node("in", "10.0.0.6", true, "lb=yes")}},
			want: map[string]want{"web": {ips: []string{"10.0.0.6"}, reason: ReasonAssigned}}},
		{name: "no node at all",
			in:   Input{Services: []*corev1.Service{lb("web", 0, 80)}},
			want: map[string]want{"web": {reason: ReasonNoNodes}}},
		{name: "the older Service keeps the port; the newer is told whose it is",
			in:   Input{Services: []*corev1.Service{lb("new", 5, 8080, 80), lb("old", 1, 80)}, Nodes: []*corev1.Node{a}},
			want: map[string]want{"old": {ips: []string{"10.0.0.1"}, reason: ReasonAssigned}, "new": {reason: ReasonPortConflict, message: []string{"80/TCP on node a is held by Service default/old (LoadBalancer)"}}}},
		{name: "the same port on another protocol is free",
			in: Input{Services: []*corev1.Service{lb("tcp", 1, 53), with(lb("udp", 2, 53), func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolUDP })},
				Nodes: []*corev1.Node{a}},
			want: map[string]want{"tcp": {ips: []string{"10.0.0.1"}, reason: ReasonAssigned}, "udp": {ips: []string{"10.0.0.1"}, reason: ReasonAssigned}}},
		{name: "steadyplane's own ports: the node API everywhere, the API server on servers",
			in:   Input{Services: []*corev1.Service{lb("api", 0, 6443), lb("kubelet", 1, 10250)}, Nodes: []*corev1.Node{a, server}, Reserved: reserved},
			want: map[string]want{"api": {ips: []string{"10.0.0.1"}, reason: ReasonAssigned, message: []string{"left out: 6443/TCP on node s is held by steadyplane (the API server)"}}, "kubelet": {reason: ReasonPortConflict, message: []string{"held by steadyplane (the node API)"}}}},
		{name: "a pod's hostPort takes its node's port",
			in:   Input{Services: []*corev1.Service{lb("web", 0, 80)}, Nodes: []*corev1.Node{a, b}, Pods: []*corev1.Pod{hostPortPod("ingress", "a", 80), with0(hostPortPod("done", "b", 80))}},
			want: map[string]want{"web": {ips: []string{"10.0.0.2"}, reason: ReasonAssigned, message: []string{"80/TCP on node a is held by a hostPort of Pod default/ingress"}}}},
		{name: "another Service's node port is taken; its own is not",
			in: Input{Services: []*corev1.Service{lb("web", 5, 30080), with(lb("np", 0), func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.Ports = []corev1.ServicePort{{Port: 1, NodePort: 30080}}
			}), with(lb("self", 6, 30443), func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30443 })}, Nodes: []*corev1.Node{a}},
			want: map[string]want{"web": {reason: ReasonPortConflict, message: []string{"held by the node port of Service default/np"}}, "self": {ips: []string{"10.0.0.1"}, reason: ReasonAssigned}}},
		{name: "a health check node port is kube-proxy's",
			in: Input{Services: []*corev1.Service{with(lb("local", 0, 80), func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 31999
			}), lb("late", 1, 31999)}, Nodes: []*corev1.Node{a}, EndpointSlices: []*discoveryv1.EndpointSlice{slice("local", map[string]bool{"a": true})}},
			want: map[string]want{"local": {ips: []string{"10.0.0.1"}, reason: ReasonAssigned}, "late": {reason: ReasonPortConflict, message: []string{"held by the health check node port of Service default/local"}}}},
		{name: "externalTrafficPolicy Local: only nodes with a ready endpoint",
			in: Input{Services: []*corev1.Service{
				with(lb("local", 0, 80), func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }),
				with(lb("none", 1, 81), func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }),
			}, Nodes: []*corev1.Node{a, b}, EndpointSlices: []*discoveryv1.EndpointSlice{slice("local", map[string]bool{"b": true}), slice("none", map[string]bool{"a": false})}},
			want: map[string]want{"local": {ips: []string{"10.0.0.2"}, reason: ReasonAssigned}, "none": {reason: ReasonNoLocalEndpoints}}},
		{name: "other classes and types are not ours",
			in: Input{Services: []*corev1.Service{
				with(lb("metallb", 0, 80), func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("metallb.io/metallb") }),
				with(lb("ours", 1, 80), func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To(ClassName) }),
				with(lb("plain", 2, 80), func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP; s.Spec.Ports[0].NodePort = 0 }),
			}, Nodes: []*corev1.Node{a}},
			want: map[string]want{"ours": {ips: []string{"10.0.0.1"}, reason: ReasonAssigned}}},
		{name: "an IPv6 Service on IPv4 nodes",
			in:   Input{Services: []*corev1.Service{with(lb("v6", 0, 80), func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} })}, Nodes: []*corev1.Node{a}},
			want: map[string]want{"v6": {reason: ReasonNoNodes}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Assign(tc.in)
			if len(got) != len(tc.want) {
				t.Fatalf("decisions for %v; want %d", keys(got), len(tc.want))
			}
			for name, w := range tc.want {
				d, ok := got[types.NamespacedName{Namespace: "default", Name: name}]
				if !ok {
					t.Fatalf("no decision for %s", name)
				}
				var ips []string
				for _, in := range d.Ingress {
					ips = append(ips, in.IP)
					if in.IPMode == nil || *in.IPMode != corev1.LoadBalancerIPModeVIP {
						t.Errorf("%s: ingress %s has ipMode %v; want VIP", name, in.IP, in.IPMode)
					}
				}
				if !reflect.DeepEqual(ips, w.ips) || d.Reason != w.reason {
					t.Errorf("%s: %v %s (%s); want %v %s", name, ips, d.Reason, d.Message, w.ips, w.reason)
				}
				for _, m := range w.message {
					if !strings.Contains(d.Message, m) {
						t.Errorf("%s: message %q lacks %q", name, d.Message, m)
					}
				}
			}
		})
	}
}

// with0 makes a pod Succeeded: its hostPort is free again.
func with0(p *corev1.Pod) *corev1.Pod { p.Status.Phase = corev1.PodSucceeded; return p }

func keys(m map[types.NamespacedName]Decision) []string {
	var out []string
	for k := range m {
		out = append(out, k.String())
	}
	return out
}

func TestParsePort(t *testing.T) {
	for in, want := range map[string]Port{"6443": {corev1.ProtocolTCP, 6443}, "53/udp": {corev1.ProtocolUDP, 53}, "9/SCTP": {corev1.ProtocolSCTP, 9}} {
		if got, err := ParsePort(in); err != nil || got != want {
			t.Errorf("ParsePort(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "65536", "80/ICMP", "x/TCP", "-1"} {
		if _, err := ParsePort(bad); err == nil {
			t.Errorf("ParsePort(%q) took it", bad)
		}
	}
}

// BenchmarkAssign decides 200 Services over 10 nodes with 300 pods: one
// pass of the controller, run on every change.
func BenchmarkAssign(b *testing.B) {
	var in Input
	in.Reserved = reserved
	for i := 0; i < 10; i++ {
		in.Nodes = append(in.Nodes, node("n"+strconv.Itoa(i), "10.0.0."+strconv.Itoa(i+1), true))
	}
	for i := 0; i < 200; i++ {
		in.Services = append(in.Services, lb("s"+strconv.Itoa(i), i, int32(1000+i%150)))
	}
	for i := 0; i < 300; i++ {
		in.Pods = append(in.Pods, hostPortPod("p"+strconv.Itoa(i), in.Nodes[i%10].Name, 0))
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Assign(in)
	}
}

// TestAssignIsStable: the same cluster listed in any order gives the same
// messages (the first holder of a port named), and a message names at
// most maxListed conflicts.
func TestAssignIsStable(t *testing.T) {
	var in Input
	for i := range 15 {
		in.Nodes = append(in.Nodes, node(fmt.Sprintf("n%02d", i), fmt.Sprintf("10.0.1.%d", i+1), true))
		in.Pods = append(in.Pods, hostPortPod(fmt.Sprintf("a-%d", i), in.Nodes[i].Name, 80), hostPortPod(fmt.Sprintf("b-%d", i), in.Nodes[i].Name, 80))
	}
	in.Services = []*corev1.Service{lb("web", 0, 80)}
	first := Assign(in)[types.NamespacedName{Namespace: "default", Name: "web"}].Message
	slices.Reverse(in.Pods)
	slices.Reverse(in.Nodes)
	if again := Assign(in)[types.NamespacedName{Namespace: "default", Name: "web"}].Message; again != first {
		t.Errorf("the message changed with the listing order:\n%s\n%s", first, again)
	}
	if !strings.Contains(first, "Pod default/a-0") || strings.Contains(first, "Pod default/b-") || !strings.HasSuffix(first, "and 5 more") {
		t.Errorf("message %q; want the first pod by name as each port's holder, and 10 conflicts named", first)
	}
}
