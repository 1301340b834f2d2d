// Package servicelb gives LoadBalancer Services the addresses of the
// cluster's nodes, as k3s's servicelb does, without a pod per Service:
// kube-proxy already sends traffic for a Service's load-balancer IPs, on
// every node, to its endpoints (source ranges, externalTrafficPolicy and
// hairpin included), so writing the nodes' InternalIPs into
// status.loadBalancer.ingress is all a node-address load balancer needs.
//
// What it must get right is the ports: an ingress IP that is a node's
// address takes that address's port for the whole node, host processes
// included, and two Services with the same address and port would make
// kube-proxy pick one of them silently. Assign decides, and says why a
// node was left out: the port is another Service's, a pod's hostPort, or
// one of steadyplane's own listeners.
package servicelb

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/utils/ptr"
)

// ClassName is the spec.loadBalancerClass this controller answers for
// (with no class at all): another implementation (MetalLB, a cloud's) can
// serve the Services that name its own class beside it.
const ClassName = "steadyplane.io/node-ip"

// ServerLabel marks a server's Node (up labels it): the ports of the API
// server and etcd are reserved there only.
const ServerLabel = "node-role.kubernetes.io/control-plane"

// ExcludeLabel keeps a node out of every load balancer, as upstream's
// service controller honours it.
const ExcludeLabel = corev1.LabelNodeExcludeBalancers

// Port is a protocol and a port number on a node's address.
type Port struct {
	Protocol corev1.Protocol
	Port     int32
}

func (p Port) String() string { return strconv.Itoa(int(p.Port)) + "/" + string(p.Protocol) }

// ParsePort reads "6443/TCP" (the protocol defaults to TCP).
func ParsePort(s string) (Port, error) {
	num, proto, found := strings.Cut(s, "/")
	p := Port{Protocol: corev1.ProtocolTCP}
	if found {
		p.Protocol = corev1.Protocol(strings.ToUpper(proto))
	}
	switch p.Protocol {
	case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
	default:
		return Port{}, fmt.Errorf("%q: protocol %q is not TCP, UDP or SCTP", s, proto)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > 65535 {
		return Port{}, fmt.Errorf("%q: %q is not a port", s, num)
	}
	p.Port = int32(n)
	return p, nil
}

// Reserved is a port steadyplane itself listens on at a node's address.
type Reserved struct {
	Port Port
	// Holder says whose it is ("the node API").
	Holder string
	// ServersOnly reserves it on servers' Nodes only (ServerLabel).
	ServersOnly bool
}

// Input is the cluster as the controller's caches hold it.
type Input struct {
	Services       []*corev1.Service
	Nodes          []*corev1.Node
	EndpointSlices []*discoveryv1.EndpointSlice
	Pods           []*corev1.Pod
	Reserved       []Reserved
	// NodeSelector, when not nil, limits load balancers to the nodes it
	// selects.
	NodeSelector labels.Selector
}

// Conflict is a node left out of a Service's load balancer because one of
// the Service's ports is already someone else's there.
type Conflict struct {
	Node   string
	Port   Port
	Holder string
}

func (c Conflict) String() string {
	return fmt.Sprintf("%s on node %s is held by %s", c.Port, c.Node, c.Holder)
}

// Reasons of a Decision (the condition's reason).
const (
	// ReasonAssigned: the Service has at least one node's address.
	ReasonAssigned = "Assigned"
	// ReasonPortConflict: every candidate node has one of its ports taken.
	ReasonPortConflict = "PortConflict"
	// ReasonNoNodes: no node is Ready, selected and of the Service's
	// address families.
	ReasonNoNodes = "NoReadyNodes"
	// ReasonNoLocalEndpoints: externalTrafficPolicy Local, and no
	// candidate node runs a ready endpoint (those nodes would drop the
	// traffic).
	ReasonNoLocalEndpoints = "NoLocalEndpoints"
)

// Decision is what a Service gets.
type Decision struct {
	// Ingress is status.loadBalancer.ingress: one entry per node, by
	// address.
	Ingress []corev1.LoadBalancerIngress
	// Nodes are the nodes whose addresses those are.
	Nodes []string
	// Conflicts are the nodes left out for a port, in node order.
	Conflicts []Conflict
	Reason    string
	Message   string
}

// Manages says whether a Service is this controller's: type LoadBalancer
// with no class or ClassName.
func Manages(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		(s.Spec.LoadBalancerClass == nil || *s.Spec.LoadBalancerClass == ClassName)
}

// holder is who has a port on a node: a description for messages, and
// the Service it belongs to, if any (a Service's own node port is no
// conflict for it).
type holder struct {
	who     string
	service types.NamespacedName
}

// holders are the ports taken on one node.
type holders map[Port]holder

// Assign decides the load balancer of every Service it manages. The older
// Service keeps a port (by creation time, then namespace and name), so a
// new Service never takes an address from one that has it; a node where
// any of a Service's ports is taken is left out of that Service whole, as
// a client reaching one port of it there would expect the others.
func Assign(in Input) map[types.NamespacedName]Decision {
	// The caches list in no order; the first holder of a port named in a
	// message must be the same every pass, or the condition would change
	// (and be written) with every unrelated event.
	in.Services = slices.SortedFunc(slices.Values(in.Services), byNamespaceName[*corev1.Service])
	in.Pods = slices.SortedFunc(slices.Values(in.Pods), byNamespaceName[*corev1.Pod])
	nodes := candidateNodes(in)
	taken := make(map[string]holders, len(nodes))
	for _, n := range nodes {
		taken[n.name] = fixedHolders(in, n)
	}

	var managed []*corev1.Service
	for _, s := range in.Services {
		if Manages(s) {
			managed = append(managed, s)
		}
	}
	sort.Slice(managed, func(i, j int) bool {
		a, b := managed[i], managed[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})

	local := localEndpointNodes(in.EndpointSlices)
	out := make(map[types.NamespacedName]Decision, len(managed))
	for _, s := range managed {
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		ports := servicePorts(s)
		var d Decision
		candidates := 0
		for _, n := range nodes {
			ips := n.ipsOf(s)
			if len(ips) == 0 {
				continue
			}
			if s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && !local[key][n.name] {
				continue
			}
			candidates++
			if c, clash := firstClash(taken[n.name], ports, n.name, key); clash {
				d.Conflicts = append(d.Conflicts, c)
				continue
			}
			owner := holder{who: "Service " + key.String() + " (LoadBalancer)", service: key}
			for _, p := range ports {
				taken[n.name][p] = owner
			}
			d.Nodes = append(d.Nodes, n.name)
			for _, ip := range ips {
				d.Ingress = append(d.Ingress, corev1.LoadBalancerIngress{IP: ip, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)})
			}
		}
		sort.Slice(d.Ingress, func(i, j int) bool { return d.Ingress[i].IP < d.Ingress[j].IP })
		d.Reason, d.Message = explain(s, d, candidates, len(nodes))
		out[key] = d
	}
	return out
}

// byNamespaceName orders objects by namespace, then name.
func byNamespaceName[T metav1.Object](a, b T) int {
	return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
}

// maxListed is how many conflicts a message names; the rest are counted.
const maxListed = 10

// explain gives a Decision its reason and message.
func explain(s *corev1.Service, d Decision, candidates, nodes int) (string, string) {
	switch {
	case len(d.Nodes) > 0 && len(d.Conflicts) > 0:
		return ReasonAssigned, fmt.Sprintf("on %d of %d nodes (%s); left out: %s", len(d.Nodes), candidates, strings.Join(d.Nodes, ", "), joinConflicts(d.Conflicts))
	case len(d.Nodes) == 1:
		return ReasonAssigned, "on node " + d.Nodes[0]
	case len(d.Nodes) > 0:
		return ReasonAssigned, fmt.Sprintf("on %d nodes (%s)", len(d.Nodes), strings.Join(d.Nodes, ", "))
	case len(d.Conflicts) > 0:
		return ReasonPortConflict, "no node is free: " + joinConflicts(d.Conflicts)
	case s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && nodes > 0:
		return ReasonNoLocalEndpoints, "externalTrafficPolicy is Local and no Ready node runs a ready endpoint of it"
	default:
		return ReasonNoNodes, fmt.Sprintf("no node is Ready, selected for load balancers (not labelled %s) and has an InternalIP of the Service's families %v", ExcludeLabel, s.Spec.IPFamilies)
	}
}

// joinConflicts lists conflicts for a message, the first maxListed of
// them (a condition's message is bounded).
func joinConflicts(cs []Conflict) string {
	var out []string
	for i, c := range cs {
		if i == maxListed {
			out = append(out, fmt.Sprintf("and %d more", len(cs)-maxListed))
			break
		}
		out = append(out, c.String())
	}
	return strings.Join(out, "; ")
}

// firstClash returns the first of ports that someone but the Service
// itself holds on a node.
func firstClash(h holders, ports []Port, node string, self types.NamespacedName) (Conflict, bool) {
	for _, p := range ports {
		if o, ok := h[p]; ok && o.service != self {
			return Conflict{Node: node, Port: p, Holder: o.who}, true
		}
	}
	return Conflict{}, false
}

// servicePorts are a Service's ports, once each.
func servicePorts(s *corev1.Service) []Port {
	var out []Port
	seen := map[Port]bool{}
	for _, sp := range s.Spec.Ports {
		p := Port{Protocol: protocolOf(sp.Protocol), Port: sp.Port}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

func protocolOf(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// candidate is a node that may carry load balancers.
type candidate struct {
	name   string
	server bool
	ips    []string
	// nodeAPIPort is where the node's agent serves its API (the Node's
	// daemon endpoint), on the node's address.
	nodeAPIPort int32
}

// ipsOf returns the node's addresses of the Service's families (a Service
// with none listed is taken as IPv4, the API server's default here).
func (n candidate) ipsOf(s *corev1.Service) []string {
	families := s.Spec.IPFamilies
	if len(families) == 0 {
		families = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	var out []string
	for _, ip := range n.ips {
		fam := corev1.IPv6Protocol
		if net.ParseIP(ip).To4() != nil {
			fam = corev1.IPv4Protocol
		}
		for _, f := range families {
			if f == fam {
				out = append(out, ip)
			}
		}
	}
	return out
}

// candidateNodes are the nodes, by name, that are Ready, selected and not
// excluded, with their InternalIPs.
func candidateNodes(in Input) []candidate {
	var out []candidate
	for _, n := range in.Nodes {
		if !nodeReady(n) || n.DeletionTimestamp != nil {
			continue
		}
		if _, excluded := n.Labels[ExcludeLabel]; excluded {
			continue
		}
		if in.NodeSelector != nil && !in.NodeSelector.Matches(labels.Set(n.Labels)) {
			continue
		}
		c := candidate{name: n.Name, nodeAPIPort: n.Status.DaemonEndpoints.KubeletEndpoint.Port}
		_, c.server = n.Labels[ServerLabel]
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address) != nil {
				c.ips = append(c.ips, a.Address)
			}
		}
		if len(c.ips) > 0 {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func nodeReady(n *corev1.Node) bool {
	_, c := nodeutil.GetNodeCondition(&n.Status, corev1.NodeReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// fixedHolders are the ports on node n that no load balancer may take:
// steadyplane's own, every Service's node ports (kube-proxy serves them on
// the node's address), Services' external IPs that are n's, and the
// hostPorts of n's pods (and the ports of its hostNetwork pods).
func fixedHolders(in Input, n candidate) holders {
	h := holders{}
	if n.nodeAPIPort != 0 {
		h[Port{Protocol: corev1.ProtocolTCP, Port: n.nodeAPIPort}] = holder{who: "steadyplane (the node API)"}
	}
	for _, r := range in.Reserved {
		if !r.ServersOnly || n.server {
			h[r.Port] = holder{who: "steadyplane (" + r.Holder + ")"}
		}
	}
	mine := map[string]bool{}
	for _, ip := range n.ips {
		mine[ip] = true
	}
	for _, s := range in.Services {
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		external := false
		for _, ip := range s.Spec.ExternalIPs {
			external = external || mine[ip]
		}
		if s.Spec.HealthCheckNodePort != 0 {
			// kube-proxy answers load balancers' health checks there.
			setOnce(h, Port{Protocol: corev1.ProtocolTCP, Port: s.Spec.HealthCheckNodePort}, holder{who: "the health check node port of Service " + key.String(), service: key})
		}
		for _, sp := range s.Spec.Ports {
			proto := protocolOf(sp.Protocol)
			if sp.NodePort != 0 {
				setOnce(h, Port{Protocol: proto, Port: sp.NodePort}, holder{who: "the node port of Service " + key.String(), service: key})
			}
			if external {
				setOnce(h, Port{Protocol: proto, Port: sp.Port}, holder{who: "an external IP of Service " + key.String(), service: key})
			}
		}
	}
	for _, p := range in.Pods {
		if p.Spec.NodeName != n.name || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		key := p.Namespace + "/" + p.Name
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			for _, cp := range c.Ports {
				port := cp.HostPort
				if p.Spec.HostNetwork && port == 0 {
					port = cp.ContainerPort
				}
				if port == 0 || (cp.HostIP != "" && cp.HostIP != "0.0.0.0" && cp.HostIP != "::" && !mine[cp.HostIP]) {
					continue
				}
				setOnce(h, Port{Protocol: protocolOf(cp.Protocol), Port: port}, holder{who: "a hostPort of Pod " + key})
			}
		}
	}
	return h
}

// setOnce keeps the first holder of a port, so that messages stay the same
// from one pass to the next.
func setOnce(h holders, p Port, o holder) {
	if _, ok := h[p]; !ok {
		h[p] = o
	}
}

// localEndpointNodes are, per Service, the nodes that run a ready
// endpoint of it.
func localEndpointNodes(slices []*discoveryv1.EndpointSlice) map[types.NamespacedName]map[string]bool {
	out := map[types.NamespacedName]map[string]bool{}
	for _, sl := range slices {
		svc := sl.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		key := types.NamespacedName{Namespace: sl.Namespace, Name: svc}
		for _, ep := range sl.Endpoints {
			if ep.NodeName == nil || (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
				continue
			}
			if out[key] == nil {
				out[key] = map[string]bool{}
			}
			out[key][*ep.NodeName] = true
		}
	}
	return out
}
