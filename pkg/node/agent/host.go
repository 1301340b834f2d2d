package agent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	podutil "k8s.io/kubernetes/pkg/util/pod"

	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/node/volume"
)

// host is what a pod worker needs of its node agent besides Options (whose
// Runtime runs the containers): the events recorder, the API's pods and
// their status, and the node's own record. The Agent is one; the worker's
// tests run on fakes.
type host interface {
	// event records an event about pod (on its mirror pod for a static pod).
	event(pod *corev1.Pod, eventType, reason, format string, args ...any)
	// apiPod returns the API object that stands for pod: the pod itself, or
	// a static pod's mirror pod (nil until it exists).
	apiPod(pod *corev1.Pod) *corev1.Pod
	// patchStatus PATCHes target's status subresource from target.Status to
	// s (upstream's PatchPodStatus: two-way strategic merge patch, UID
	// precondition); mirror says target is a mirror pod the agent wrote.
	patchStatus(ctx context.Context, target *corev1.Pod, s corev1.PodStatus, mirror bool) (patch []byte, unchanged bool, err error)
	// removePod deletes a terminated pod from the API for good (grace 0,
	// UID precondition).
	removePod(ctx context.Context, pod *corev1.Pod) error
	// volumeSource reads the configMaps, secrets and tokens of API volumes.
	volumeSource() volume.Source
	// allocatable is what the node offers pods.
	allocatable() corev1.ResourceList
	// serviceEnv returns the service variables of pod's containers
	// (serviceEnvVars); static says it is a static pod.
	serviceEnv(pod *corev1.Pod, static bool) (map[string]string, error)
	// requested sums the requests of the pods the node runs, but the one
	// of UID except.
	requested(except types.UID) corev1.ResourceList
	// putLocal keeps rec, the pod in podDir, in the node's own record.
	putLocal(podDir string, rec *localstatus.Pod) error
	// forgetLocal drops the pod uid from the record that is served.
	forgetLocal(uid types.UID)
	// images gets containers their images; nil on a node without an image
	// store (only host roots run there).
	images() *imageService
	// pullSecrets returns the pod's image pull secrets that can be read;
	// one that cannot is left out with an event, as the kubelet does.
	pullSecrets(ctx context.Context, pod *corev1.Pod) []corev1.Secret
	// podDNS returns the pod's resolv.conf by its dnsPolicy.
	podDNS(ctx context.Context, pod *corev1.Pod) ([]byte, error)
}

var _ host = (*Agent)(nil)

func (a *Agent) patchStatus(ctx context.Context, target *corev1.Pod, s corev1.PodStatus, mirror bool) ([]byte, bool, error) {
	written, patch, unchanged, err := podutil.PatchPodStatus(ctx, a.client, target.Namespace, target.Name, target.UID, target.Status, s)
	if err == nil && mirror && written != nil { // nil: nothing was sent
		a.mirrors.Mutation(written) // the base of the next patch
	}
	return patch, unchanged, err
}

func (a *Agent) removePod(ctx context.Context, pod *corev1.Pod) error {
	zero := int64(0)
	return a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
}

func (a *Agent) volumeSource() volume.Source { return volume.ClientSource{Client: a.client} }

func (a *Agent) putLocal(podDir string, rec *localstatus.Pod) error { return a.local.Put(podDir, rec) }

func (a *Agent) forgetLocal(uid types.UID) { a.local.Forget(uid) }

func (a *Agent) images() *imageService { return a.imgs }

func (a *Agent) pullSecrets(ctx context.Context, pod *corev1.Pod) []corev1.Secret {
	var out []corev1.Secret
	for _, ref := range pod.Spec.ImagePullSecrets {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := a.client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		cancel()
		if err != nil {
			a.event(pod, corev1.EventTypeWarning, "FailedToRetrieveImagePullSecret", "Unable to retrieve image pull secret %s/%s; the image pull may not succeed: %v", pod.Namespace, ref.Name, err)
			continue
		}
		out = append(out, *s)
	}
	return out
}

func (a *Agent) podDNS(ctx context.Context, pod *corev1.Pod) ([]byte, error) {
	return podDNS(ctx, a.dns, pod)
}
