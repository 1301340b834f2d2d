package agent

import (
	"context"
	"math"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// terminate runs a deletion: stop the containers within the grace period,
// write the final status, then remove the pod for good (grace 0, UID
// precondition), as the kubelet does.
func (w *worker) terminate(ctx context.Context, pod *corev1.Pod) {
	grace := gracePeriod(pod)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	w.stopAll(pod, grace)
	w.write(ctx, pod)
	w.teardownPod(ctx, pod)
	if w.static {
		return
	}
	removeUntilGone(ctx, klog.KObj(pod), deleteBackoff, func(ctx context.Context) error {
		return w.host.removePod(ctx, pod)
	})
}

// deleteBackoff spaces the attempts to remove a terminated pod: 0.5s
// doubling to 30s, until it is gone or the agent stops.
var deleteBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}

// removeUntilGone calls del until the pod is gone: done, NotFound, or
// Conflict (another pod of that name, its UID precondition failed). Any other
// error (the API server down, a timeout) is logged and retried with backoff,
// so that a terminated pod never stays in the API with its deletion pending.
func removeUntilGone(ctx context.Context, pod klog.ObjectRef, b wait.Backoff, del func(context.Context) error) {
	retryUntilDone(ctx, b, func(ctx context.Context) bool {
		err := del(ctx)
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return true
		}
		klog.ErrorS(err, "Removing a terminated pod; will retry", "pod", pod)
		deleteRetries.Inc()
		return false
	})
}

// stopAll stops every run of the pod within grace, at once, and records
// their ends: the containers do not run again.
func (w *worker) stopAll(pod *corev1.Pod, grace time.Duration) {
	var wg sync.WaitGroup
	for _, c := range w.containers {
		w.stopProbes(c)
		if c.run != nil {
			wg.Add(1)
			go func(r runtime.Container, name string) {
				defer wg.Done()
				select {
				case <-r.Done():
					return
				default:
				}
				w.host.event(pod, corev1.EventTypeNormal, "Killing", "Stopping container %s", name)
				r.Stop(grace)
			}(c.run, c.spec.Name)
		}
	}
	wg.Wait()
	for _, c := range w.containers {
		if c.run != nil {
			// As the kubelet does, a run stopped with its pod reports
			// its termination message too.
			term := w.terminated(pod, c)
			c.run = nil
			w.apply(context.Background(), pod, c, event{kind: evStopped, term: term}, time.Now())
		}
	}
}

func gracePeriod(pod *corev1.Pod) time.Duration {
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}
