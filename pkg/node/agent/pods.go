package agent

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	kubelettypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/steadyplane/steadyplane/pkg/node/allocation"
	"github.com/steadyplane/steadyplane/pkg/node/podworker"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// podKey is the key of pod in the informer's store and of its worker:
// namespace/name.
func podKey(pod *corev1.Pod) string {
	return types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}.String()
}

func (a *Agent) podChanged(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if _, mirror := pod.Annotations[staticpod.MirrorAnnotation]; mirror {
		a.mirrorChanged(pod)
		return
	}
	pod = fromAPI(pod)
	key := podKey(pod)
	a.mu.Lock()
	defer a.mu.Unlock()
	if w, ok := a.workers[key]; ok {
		if w.Pod().UID == pod.UID {
			w.Update(pod)
			return
		}
		w.Delete() // a new pod with the same name: the old one is gone
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return // finished pods are not run again
	}
	// A pod a node agent has run already (this one before a restart) was
	// admitted then; only new ones are checked, as the kubelet admits.
	if pod.Status.Phase == corev1.PodPending && len(pod.Status.ContainerStatuses) == 0 {
		if reason, message := allocation.Admit(pod, a.activePodsLocked(string(pod.UID)), a.workerNode.Allocatable); reason != "" {
			if !a.rejected[pod.UID] {
				a.rejected[pod.UID] = true
				a.reject(ctx, pod, reason, message)
			}
			return
		}
	}
	a.startWorker(ctx, key, podworker.New(a, a.workerNode, pod, false))
}

// fromAPI is pod, read from the API, marked as such: its source is where
// the agent read it, never what its annotations claim. A pod annotated
// kubernetes.io/config.source: file would otherwise pass for a static
// pod: never evicted under pressure (kubelettypes.IsCriticalPod), its
// status sent to a mirror pod that does not exist. Upstream's kubelet
// marks what it reads from the API "api" the same way.
func fromAPI(pod *corev1.Pod) *corev1.Pod {
	if src, ok := pod.Annotations[staticpod.SourceAnnotation]; !ok || src == kubelettypes.ApiserverSource {
		return pod
	}
	pod = pod.DeepCopy() // the informer's object is shared
	pod.Annotations[staticpod.SourceAnnotation] = kubelettypes.ApiserverSource
	return pod
}

func (a *Agent) startWorker(ctx context.Context, key string, w *podworker.Worker) {
	a.startWorkerAfter(ctx, key, w, nil)
}

// startWorkerAfter runs w once after is closed (nil: at once): a replaced
// static pod has stopped before its successor starts. Called with a.mu held.
func (a *Agent) startWorkerAfter(ctx context.Context, key string, w *podworker.Worker, after <-chan struct{}) {
	a.workers[key] = w
	runningPods.Set(float64(len(a.workers)))
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if after != nil {
			select {
			case <-after:
			case <-ctx.Done():
				return
			}
		}
		w.Run(ctx)
		a.mu.Lock()
		if a.workers[key] == w {
			delete(a.workers, key)
		}
		runningPods.Set(float64(len(a.workers)))
		a.mu.Unlock()
	}()
}

func (a *Agent) podDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if _, mirror := pod.Annotations[staticpod.MirrorAnnotation]; mirror {
		a.mirrorChanged(nil)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.rejected, pod.UID)
	if w, ok := a.workers[podKey(pod)]; ok && w.Pod().UID == pod.UID {
		w.Delete()
	}
}

// apiPod returns the API object that stands for pod: the pod itself, or for
// a static pod its mirror pod (nil until it exists). Status and events go to it.
func (a *Agent) apiPod(pod *corev1.Pod) *corev1.Pod {
	if pod.Annotations[staticpod.SourceAnnotation] != "file" {
		return pod
	}
	return a.mirrorFor(pod)
}

// Event implements podworker.Host: an event about pod, on its mirror pod
// for a static pod, counted and logged.
func (a *Agent) Event(pod *corev1.Pod, eventType, reason, format string, args ...any) {
	eventsTotal.WithLabelValues(reason).Inc()
	klog.InfoS(fmt.Sprintf(format, args...), "pod", klog.KObj(pod), "reason", reason)
	if a.recorder == nil {
		return
	}
	ref := pod
	if p := a.apiPod(pod); p != nil {
		ref = p
	}
	a.recorder.Eventf(ref, eventType, reason, format, args...)
}

// Requested implements podworker.Host: the pods of every worker but
// except's that have not ended, with the resources allocated to them.
func (a *Agent) Requested(except types.UID) corev1.ResourceList {
	a.mu.Lock()
	pods := a.activePodsLocked(string(except))
	a.mu.Unlock()
	return allocation.Requests(pods)
}

// ServiceEnv implements podworker.Host, as the kubelet's service links: the
// variables of the Services of pod's namespace (unless the pod turns
// enableServiceLinks off) and, for every pod, of the API server's Service
// "kubernetes" in namespace default. Until the Services have been listed
// once it fails for a pod of the API (its start is tried again); a static
// pod, which may start before any API server, gets what is known.
func (a *Agent) ServiceEnv(pod *corev1.Pod, static bool) (map[string]string, error) {
	if a.services == nil || (!a.servicesSynced() && !static) {
		if static {
			return nil, nil
		}
		return nil, errors.New("services have not yet been read at least once, cannot construct envvars")
	}
	return podworker.ServiceEnvVars(pod, a.services.List()), nil
}
