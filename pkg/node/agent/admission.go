package agent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
)

// activePodsLocked are the pods of every worker but the one of UID except
// that have not finished, with the resources allocated to them. Called
// with a.mu held.
func (a *Agent) activePodsLocked(except string) []*corev1.Pod {
	var pods []*corev1.Pod
	for _, w := range a.workers {
		if p, ok := w.Allocated(); ok && string(p.UID) != except {
			pods = append(pods, p)
		}
	}
	return pods
}

// reject fails pod without running it, as the kubelet's rejectPod: Failed
// with the reason and "Pod was rejected: " and the message, an event and a
// metric. Called with a.mu held; the status is written in the background.
func (a *Agent) reject(ctx context.Context, pod *corev1.Pod, reason, message string) {
	a.Event(pod, corev1.EventTypeWarning, reason, "%s", message)
	admissionRejections.WithLabelValues(reason).Inc()
	status := corev1.PodStatus{Phase: corev1.PodFailed, Reason: reason, Message: "Pod was rejected: " + message, QOSClass: v1qos.GetPodQOS(pod)}
	go func() {
		if _, _, err := a.patchStatus(ctx, pod, status, false); err != nil {
			klog.ErrorS(err, "Writing a rejected pod's status", "pod", klog.KObj(pod))
		}
	}()
}
