package agent

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/steadyplane/steadyplane/pkg/node/kubeletapi"
	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/node/podworker"
)

// nodeAPIHost is the agent as the node API sees it.
type nodeAPIHost struct{ a *Agent }

var _ kubeletapi.Host = nodeAPIHost{}

// worker returns the worker of pod namespace/name, an API pod or a static
// pod; uid, when given, must be the pod's or its mirror pod's.
func (h nodeAPIHost) worker(namespace, name string, uid types.UID) (*podworker.Worker, error) {
	h.a.mu.Lock()
	key := types.NamespacedName{Namespace: namespace, Name: name}.String()
	candidates := []*podworker.Worker{h.a.workers[key], h.a.workers[staticKeyPrefix+key]}
	h.a.mu.Unlock()
	for _, w := range candidates {
		if w == nil {
			continue
		}
		pod := w.Pod()
		if uid == "" || pod.UID == uid {
			return w, nil
		}
		if m := h.a.mirrorFor(pod); w.Static() && m != nil && m.UID == uid {
			return w, nil
		}
	}
	return nil, fmt.Errorf("pod %q in namespace %q: %w on node %s", name, namespace, kubeletapi.ErrNotFound, h.a.opts.NodeName)
}

// Container returns a container of a pod the node runs.
func (h nodeAPIHost) Container(namespace, pod, uid, container string) (*kubeletapi.Container, error) {
	w, err := h.worker(namespace, pod, types.UID(uid))
	if err != nil {
		return nil, err
	}
	c := w.Container(container)
	if c == nil {
		return nil, fmt.Errorf("container %q in pod %q: %w", container, pod, kubeletapi.ErrNotFound)
	}
	return c, nil
}

// PodNetNS returns the pod's network namespace, "" for the host's.
func (h nodeAPIHost) PodNetNS(namespace, pod, uid string) (string, error) {
	w, err := h.worker(namespace, pod, types.UID(uid))
	if err != nil {
		return "", err
	}
	return w.NetNS(), nil
}

// Pods returns the node's pods with the status the agent computed.
func (h nodeAPIHost) Pods() *corev1.PodList { return localstatus.PodList(h.a.local.List()) }
