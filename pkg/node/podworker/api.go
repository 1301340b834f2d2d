package podworker

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/steadyplane/steadyplane/pkg/node/kubeletapi"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// New returns the worker of pod on node n, whose agent is h; static says
// the pod comes from a manifest (its status goes to its mirror pod).
func New(h Host, n *Node, pod *corev1.Pod, static bool) *Worker {
	return newWorker(h, n, pod, static)
}

// Static says whether the worker's pod comes from a manifest.
func (w *Worker) Static() bool { return w.static }

// Finished is closed once the worker has stopped its containers and
// returned from Run.
func (w *Worker) Finished() <-chan struct{} { return w.finished }

// Pod is the latest version of the worker's pod.
func (w *Worker) Pod() *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod
}

// Allocated is the pod with the resources its containers were allocated,
// as the node's other pods count it, and false once the pod is gone or
// ended (it then counts for nothing).
func (w *Worker) Allocated() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pod
	if p == nil || w.asked.kind == podGone || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil, false
	}
	return w.allocated, true
}

// Container is what the node API sees of container name: its status,
// its run, its logs; nil when the pod has no such container.
func (w *Worker) Container(name string) *kubeletapi.Container {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.view[name]
}

// NetNS is the pod's network namespace, "" on the host's network.
func (w *Worker) NetNS() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.netns
}

// EvictionCandidate returns the worker's pod if it runs (not deleted, not
// evicted, not a static pod).
func (w *Worker) EvictionCandidate() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.static || w.asked.kind != podSync || w.pod == nil || w.pod.DeletionTimestamp != nil {
		return nil, false
	}
	return w.pod, true
}

// RequestEviction has the worker evict its pod with msg at its next turn.
func (w *Worker) RequestEviction(msg string) { w.ask(podEvent{kind: podEvicted, message: msg}) }

// Usage measures what pod's running containers use of res: memory and
// processes from the runtime, disk from the pod's directory (emptyDirs,
// writable layers, logs: storageUsage). known is false when it could not be
// measured.
func (w *Worker) Usage(pod *corev1.Pod, res corev1.ResourceName) (used int64, known bool) {
	if res == corev1.ResourceEphemeralStorage {
		names := make([]string, 0, len(pod.Spec.Containers))
		for _, c := range pod.Spec.Containers {
			names = append(names, c.Name)
		}
		u := measureStorage(w.podDir(pod), pod, names)
		for _, n := range u.emptyDirs {
			used += n
		}
		for _, n := range u.containers {
			used += n
		}
		return used, true
	}
	w.mu.Lock()
	var runs []runtime.Container
	for _, v := range w.view {
		if v.Run != nil {
			runs = append(runs, v.Run)
		}
	}
	w.mu.Unlock()
	known = true
	for _, r := range runs {
		m, ok := r.(runtime.Measured)
		if !ok {
			known = false
			continue
		}
		got, ok := m.Usage()
		if !ok {
			continue // ended meanwhile
		}
		if res == corev1.ResourceMemory {
			used += got.MemoryWorkingSet
		} else {
			used += got.Processes
		}
	}
	return used, known
}
