package podworker

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Update gives the worker a newer version of its pod.
func (w *Worker) Update(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		w.endHooks() // a postStart hook under way must not hold the deletion
	}
	w.Poke()
}

// Retire stops the pod with its grace period; nothing is removed from the
// API (a static pod's mirror is handled with the manifests).
func (w *Worker) Retire() { w.ask(podEvent{kind: podRetired}) }

// Delete stops the pod now: it left the API (or another pod took its
// name).
func (w *Worker) Delete() { w.ask(podEvent{kind: podGone}) }

// ask records the agent's request ev unless one more pressing is there
// (gone, then retired, then evicted), and wakes the worker. A pod that
// goes stops at once: a postStart hook under way and a status write in
// flight end too.
func (w *Worker) ask(ev podEvent) {
	w.mu.Lock()
	if ev.kind > w.asked.kind || w.asked.kind == podSync {
		w.asked = ev
	}
	w.mu.Unlock()
	if ev.kind != podEvicted && w.endHooks != nil {
		w.endHooks()
		w.endWrites()
	}
	w.Poke()
}

// endWrites abandons a status write in flight: the pod stops now, and a
// static pod's next version writes its own status.
func (w *Worker) endWrites() {
	if w.stopWrites != nil {
		w.stopWrites()
	}
}

// Poke has the worker take a turn now.
func (w *Worker) Poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run drives the pod until it is finished (deleted, retired, or the agent
// stops as ctx ends), one turn per change or per second, and closes
// Finished. An ended pod waits for its deletion without turns.
func (w *Worker) Run(ctx context.Context) {
	defer close(w.finished)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		w.mu.Lock()
		pod, asked := w.pod, w.asked
		w.mu.Unlock()
		w.turn(ctx, pod, observe(pod, asked, ctx.Err() != nil, w.node.StopPodsOnExit), time.Now())
		var tick <-chan time.Time
		switch w.life.state {
		case podFinished:
			return
		case podRunning:
			tick = t.C
		}
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-tick:
		}
	}
}

// turn feeds ev to the pod's life (podTransition), does what the
// transition asks, and feeds the events those actions find (a sync finding
// the pod's end) after them, each transition done before the next begins.
func (w *Worker) turn(ctx context.Context, pod *corev1.Pod, ev podEvent, now time.Time) {
	for queue := []podEvent{ev}; len(queue) > 0; queue = queue[1:] {
		var acts []podAction
		w.life, acts = podTransition(w.life, queue[0])
		for _, a := range acts {
			if next := w.act(ctx, pod, a, now); next != nil {
				queue = append(queue, *next)
			}
		}
	}
}

// act does a pod action, and returns the event it found, if any.
func (w *Worker) act(ctx context.Context, pod *corev1.Pod, a podAction, now time.Time) *podEvent {
	switch a.kind {
	case podActSync:
		return w.sync(ctx, pod, now)
	case podActEnd:
		w.end(ctx, pod, a.eventType, a.reason, a.message, w.graceOf(pod, a.grace))
	case podActTerminate:
		w.terminate(ctx, pod)
	case podActStop:
		w.stopAll(pod, w.graceOf(pod, a.grace))
		w.teardownPod(context.WithoutCancel(ctx), pod)
	case podActStopForAgent:
		w.stopForAgent(pod)
	}
	return nil
}

// graceOf is the time g gives pod's containers.
func (w *Worker) graceOf(pod *corev1.Pod, g grace) time.Duration {
	if g == gracePod {
		return gracePeriod(pod)
	}
	return 0
}

// stopForAgent stops the pod's containers as the agent stops, and records
// their ends, so that the next agent knows which containers finished for
// good: briefly in the API, and in the node's record, which stays (the
// next agent continues its counts). The pod's addresses go back; the next
// agent makes new ones.
func (w *Worker) stopForAgent(pod *corev1.Pod) {
	w.stopAll(pod, gracePeriod(pod))
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	w.write(sctx, pod)
	cancel()
	if w.node.Runtime.Isolated() {
		tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w.teardownPod(tctx, pod)
		cancel()
	}
	w.node.Local.Forget(pod.UID)
	w.recordLocal(pod)
}
