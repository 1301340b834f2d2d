package agent

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// ReasonNodePorts is the kubelet's reason for a pod rejected because a
// pod on the node holds one of its host ports (its NodePorts predicate).
const ReasonNodePorts = "NodePorts"

// admissionVerdict decides, as the kubelet's admission (its general
// predicates) does for a pod new to the node, whether pod may run beside
// others on a node that offers allocatable: "" when it may; else the
// reason of its rejection (NodePorts, OutOfpods, OutOfcpu, OutOfmemory)
// and the message. The scheduler checks the same before it binds a pod;
// this catches pods given a nodeName directly and pods that raced.
func admissionVerdict(pod *corev1.Pod, others []*corev1.Pod, allocatable corev1.ResourceList) (reason, message string) {
	if hostPortsConflict(pod, others) {
		return ReasonNodePorts, "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
	}
	if capacity := amount(allocatable, corev1.ResourcePods); capacity > 0 && int64(len(others))+1 > capacity {
		return "OutOfpods", insufficient(corev1.ResourcePods, 1, int64(len(others)), capacity)
	}
	if name, message := overcommitted(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}), podsRequests(others), allocatable); message != "" {
		return "OutOf" + string(name), message
	}
	return "", ""
}

// insufficient is the kubelet's message for a resource a pod does not
// fit in (its InsufficientResourceError).
func insufficient(name corev1.ResourceName, requested, used, capacity int64) string {
	return fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", name, requested, used, capacity)
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

// activePodsLocked are the pods of every worker but the one of UID except
// that have not finished, with the resources allocated to them. Called
// with a.mu held.
func (a *Agent) activePodsLocked(except string) []*corev1.Pod {
	var pods []*corev1.Pod
	for _, w := range a.workers {
		w.mu.Lock()
		p, allocated, gone := w.pod, w.allocated, w.gone
		w.mu.Unlock()
		if p != nil && !gone && string(p.UID) != except && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			pods = append(pods, allocated)
		}
	}
	return pods
}

// reject fails pod without running it, as the kubelet's rejectPod: Failed
// with the reason and "Pod was rejected: " and the message, an event and a
// metric. Called with a.mu held; the status is written in the background.
func (a *Agent) reject(ctx context.Context, pod *corev1.Pod, reason, message string) {
	a.event(pod, corev1.EventTypeWarning, reason, "%s", message)
	admissionRejections.WithLabelValues(reason).Inc()
	status := corev1.PodStatus{Phase: corev1.PodFailed, Reason: reason, Message: "Pod was rejected: " + message, QOSClass: v1qos.GetPodQOS(pod)}
	go func() {
		if _, _, err := a.patchStatus(ctx, pod, status, false); err != nil {
			klog.ErrorS(err, "Writing a rejected pod's status", "pod", klog.KObj(pod))
		}
	}()
}
