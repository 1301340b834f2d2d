// Package allocation decides what the pods of a node may ask of it, as
// the kubelet's admission and in-place resize do: whether a new pod fits
// beside the others (Admit), and whether a resize of a running one does
// (Resize). Pure functions of the pods and the node's allocatable; the
// node agent and its pod workers act on the verdicts.
package allocation

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// ReasonNodePorts is the kubelet's reason for a pod rejected because a
// pod on the node holds one of its host ports (its NodePorts predicate).
const ReasonNodePorts = "NodePorts"

// Admit decides, as the kubelet's admission (its general
// predicates) does for a pod new to the node, whether pod may run beside
// others on a node that offers allocatable: "" when it may; else the
// reason of its rejection (NodePorts, OutOfpods, OutOfcpu, OutOfmemory)
// and the message. The scheduler checks the same before it binds a pod;
// this catches pods given a nodeName directly and pods that raced.
func Admit(pod *corev1.Pod, others []*corev1.Pod, allocatable corev1.ResourceList) (reason, message string) {
	if hostPortsConflict(pod, others) {
		return ReasonNodePorts, "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
	}
	if capacity := amount(allocatable, corev1.ResourcePods); capacity > 0 && int64(len(others))+1 > capacity {
		return "OutOfpods", insufficient(corev1.ResourcePods, 1, int64(len(others)), capacity)
	}
	if name, message := overcommitted(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}), Requests(others), allocatable); message != "" {
		return "OutOf" + string(name), message
	}
	return "", ""
}

// hostPortsConflict reports whether a host port of pod is held by one of
// others, as the scheduler's NodePorts predicate (which the kubelet's
// admission runs) decides: the ports of their containers and sidecars, the
// same protocol and port on the same address or on 0.0.0.0.
func hostPortsConflict(pod *corev1.Pod, others []*corev1.Pod) bool {
	wanted := schedutil.GetHostPorts(pod)
	if len(wanted) == 0 {
		return false
	}
	held := fwk.HostPortInfo{}
	for _, o := range others {
		for _, p := range schedutil.GetHostPorts(o) {
			held.Add(p.HostIP, string(p.Protocol), p.HostPort)
		}
	}
	return slices.ContainsFunc(wanted, func(p corev1.ContainerPort) bool {
		return held.CheckConflict(p.HostIP, string(p.Protocol), p.HostPort)
	})
}

// insufficient is the kubelet's message for a resource a pod does not
// fit in (its InsufficientResourceError).
func insufficient(name corev1.ResourceName, requested, used, capacity int64) string {
	return fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", name, requested, used, capacity)
}

// Resize decides whether a resize of a pod to requests fits a node
// that offers allocatable, of which other pods request othersRequested: ""
// when it does; else the PodResizePending reason and message, as the
// kubelet's: Infeasible when the pod alone asks more than the node has
// (it never fits), Deferred when the others leave too little (it may, once
// they end).
func Resize(requests, allocatable, othersRequested corev1.ResourceList) (reason, message string) {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		want, capacity := amount(requests, name), amount(allocatable, name)
		if want == 0 || capacity == 0 {
			continue
		}
		if want > capacity {
			return corev1.PodReasonInfeasible, fmt.Sprintf("Node didn't have enough capacity: %s, requested: %d, capacity: %d", name, want, capacity)
		}
	}
	if _, message := overcommitted(requests, othersRequested, allocatable); message != "" {
		return corev1.PodReasonDeferred, message
	}
	return "", ""
}

// overcommitted is the first of cpu and memory of which requests and used
// together ask more than allocatable, with the kubelet's message; "" when
// both fit. Admission and resize decide by it.
func overcommitted(requests, used, allocatable corev1.ResourceList) (corev1.ResourceName, string) {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		w, u, capacity := amount(requests, name), amount(used, name), amount(allocatable, name)
		if w > 0 && capacity > 0 && w+u > capacity {
			return name, insufficient(name, w, u, capacity)
		}
	}
	return "", ""
}

// amount is q of name as the kubelet's admission counts it: CPU in
// thousandths, everything else in units.
func amount(l corev1.ResourceList, name corev1.ResourceName) int64 {
	q, ok := l[name]
	if !ok {
		return 0
	}
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// Requests sums the requests of pods, as the kubelet's admission
// counts the pods it runs.
func Requests(pods []*corev1.Pod) corev1.ResourceList {
	sum := corev1.ResourceList{}
	for _, p := range pods {
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			total := sum[name]
			total.Add(q)
			sum[name] = total
		}
	}
	return sum
}
