package podworker

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
func (w *Worker) terminate(ctx context.Context, pod *corev1.Pod) {
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
		return w.host.RemovePod(ctx, pod)
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
	RetryUntilDone(ctx, b, func(ctx context.Context) bool {
		err := del(ctx)
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return true
		}
		klog.ErrorS(err, "Removing a terminated pod; will retry", "pod", pod)
		deleteRetries.Inc()
		return false
	})
}

// stopAll stops every run of the pod within grace and records their ends:
// the containers do not run again.
func (w *Worker) stopAll(pod *corev1.Pod, grace time.Duration) {
	w.stopFor(pod, w.containers, grace)
}

// stopFor stops the runs of cs within grace (see stopRuns) and records their
// ends: they do not run again.
func (w *Worker) stopFor(pod *corev1.Pod, cs []*container, grace time.Duration) {
	w.stopRuns(pod, cs, grace)
	for _, c := range cs {
		if c.run != nil {
			// As the kubelet does, a run stopped with its pod reports
			// its termination message too.
			term := w.terminated(pod, c)
			c.run = nil
			w.apply(context.Background(), pod, c, event{kind: evStopped, term: term}, time.Now())
		}
	}
}

// minStopGrace is the least time a run is given to stop after its preStop
// hook and its turn took the grace period, as the kubelet's 2 s.
const minStopGrace = 2 * time.Second

// stopRuns stops the runs of cs within grace as the kubelet does: every
// preStop hook at once, then each run once those it waits for ended
// (stopTurns: sidecars after the regular containers, in reverse order),
// with what is left of grace, at least minStopGrace.
func (w *Worker) stopRuns(pod *corev1.Pod, cs []*container, grace time.Duration) {
	deadline := time.Now().Add(grace)
	turns := stopTurns(cs)
	ended := make([]chan struct{}, len(cs))
	for i := range ended {
		ended[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	for i, c := range cs {
		w.stopProbes(c)
		if c.run == nil {
			close(ended[i])
			continue
		}
		select {
		case <-c.run.Done():
			close(ended[i])
			continue
		default:
		}
		// A run being killed (liveness, resize) has had its preStop hook.
		stop := w.stopperOf(pod, c, c.phase != phaseKilling)
		after := make([]chan struct{}, 0, len(turns[i]))
		for _, k := range turns[i] {
			after = append(after, ended[k])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(ended[i])
			w.host.Event(pod, corev1.EventTypeNormal, "Killing", "Stopping container %s", stop.name)
			stop.stop(deadline, grace > 0, after)
		}()
	}
	wg.Wait()
}

// stopTurns returns, for each container of cs, the indexes of those whose
// runs must end before its own is stopped: a sidecar waits for every regular
// container and for the sidecars after it, as the kubelet's termination
// ordering; the others wait for none.
func stopTurns(cs []*container) [][]int {
	turns := make([][]int, len(cs))
	for i, c := range cs {
		if !c.sidecar {
			continue
		}
		for k, o := range cs {
			if !o.init && !o.ephemeral || o.sidecar && k > i {
				turns[i] = append(turns[i], k)
			}
		}
	}
	return turns
}

// stopper is what stopping one run needs, taken from its container so that
// the stop can go on in the background while the worker goes on.
type stopper struct {
	name string
	run  runtime.Container
	// preStop runs the container's preStop hook; nil without one.
	preStop func(ctx context.Context) (string, error)
	event   func(eventType, reason, format string, args ...any)
}

// stopperOf returns the stopper of c's current run, which runs its preStop
// hook if preStop says so.
func (w *Worker) stopperOf(pod *corev1.Pod, c *container, preStop bool) stopper {
	s := stopper{name: c.spec.Name, run: c.run, event: func(t, r, f string, a ...any) { w.host.Event(pod, t, r, f, a...) }}
	if lc := c.spec.Lifecycle; lc != nil && lc.PreStop != nil && preStop {
		s.preStop = w.hookRunner(pod, c, lc.PreStop)
	}
	return s
}

// stop runs the preStop hook until deadline, waits for the runs in after to
// end (until deadline too), then stops the run with what is left, at least
// minStopGrace unless graceful is false (a pod gone from the API: killed at
// once). A failed hook is an event; the run stops all the same.
func (s stopper) stop(deadline time.Time, graceful bool, after []chan struct{}) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if s.preStop != nil && ctx.Err() == nil {
		if msg, err := s.preStop(ctx); err != nil {
			hookFailures.WithLabelValues("preStop").Inc()
			s.event(corev1.EventTypeWarning, "FailedPreStopHook", "%s", msg)
		}
	}
	for _, ch := range after {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	left := time.Until(deadline)
	if graceful {
		left = max(left, minStopGrace)
	}
	s.run.Stop(max(left, 0))
}

// killGrace is how long a run stopped for a failed liveness probe or a
// resize has: the liveness probe's terminationGracePeriodSeconds when it
// sets one, as the kubelet's, else the pod's.
func killGrace(pod *corev1.Pod, c *container) time.Duration {
	if p := c.spec.LivenessProbe; p != nil && p.TerminationGracePeriodSeconds != nil && !c.resizeRestart {
		return time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
	}
	return gracePeriod(pod)
}

func gracePeriod(pod *corev1.Pod) time.Duration {
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}
