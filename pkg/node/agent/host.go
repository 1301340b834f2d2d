package agent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podutil "k8s.io/kubernetes/pkg/util/pod"

	"github.com/steadyplane/steadyplane/pkg/node/podworker"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

var _ podworker.Host = (*Agent)(nil)

// PatchStatus implements podworker.Host: the object that stands for pod in
// the API (the pod, or a static pod's mirror, skipped until it exists)
// gets the status statusOf makes of it; a mirror pod the agent wrote is
// the base of its next patch.
func (a *Agent) PatchStatus(ctx context.Context, pod *corev1.Pod, statusOf func(target *corev1.Pod) corev1.PodStatus) ([]byte, bool, error) {
	target := a.apiPod(pod)
	if target == nil {
		return nil, true, nil
	}
	return a.patchStatus(ctx, target, statusOf(target), pod.Annotations[staticpod.SourceAnnotation] == "file")
}

// patchStatus PATCHes target's status subresource from target.Status to s
// (upstream's PatchPodStatus); mirror says target is a mirror pod the agent
// wrote.
func (a *Agent) patchStatus(ctx context.Context, target *corev1.Pod, s corev1.PodStatus, mirror bool) ([]byte, bool, error) {
	written, patch, unchanged, err := podutil.PatchPodStatus(ctx, a.client, target.Namespace, target.Name, target.UID, target.Status, s)
	if err == nil && mirror && written != nil { // nil: nothing was sent
		a.mirrors.Mutation(written) // the base of the next patch
	}
	return patch, unchanged, err
}

// RemovePod implements podworker.Host.
func (a *Agent) RemovePod(ctx context.Context, pod *corev1.Pod) error {
	zero := int64(0)
	return a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
}
