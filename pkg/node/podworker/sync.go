package podworker

import (
	"context"
	"errors"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/probe"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// sync brings the containers one step towards what the pod asks at time
// now, then writes the status if it changed and keeps it in the local
// record. It returns the pod's end when it finds one (past its deadline,
// over its local storage), and then does nothing else.
func (w *Worker) sync(ctx context.Context, pod *corev1.Pod, now time.Time) *podEvent {
	if err := w.setupPod(ctx, pod, now); err != nil {
		w.podNotReady(ctx, pod, err, now)
		w.write(ctx, pod)
		w.recordLocal(pod)
		return nil
	}
	start := w.startTime.Time
	if pod.Status.StartTime != nil {
		start = pod.Status.StartTime.Time // what the API shows
	}
	if !w.allEnded() && pastActiveDeadline(pod, start, now) {
		return &podEvent{kind: podDeadline}
	}
	w.setupErr = ""
	w.addEphemeral(pod)
	w.resize(ctx, pod, now)
	if now.Sub(w.storageAt) >= storageCheckPeriod {
		w.storageAt = now
		if msg := storageViolation(pod, w.storageUsage(pod)); msg != "" {
			return &podEvent{kind: podEvicted, message: msg}
		}
	}
	w.endSidecarsOfTerminal(ctx, pod, now)
	// Init containers run one after the other: one that must end holds the
	// rest back until it succeeded, a sidecar until it started. Once the
	// pod was initialized, only its sidecars run again.
	held := false
	for _, c := range w.containers {
		switch {
		case c.sidecar:
			if held || w.sidecarsEnded {
				continue
			}
			w.step(ctx, pod, c, now)
			held = !w.initialized && !w.sidecarStarted(c)
		case c.init:
			if held || w.initialized || c.done != nil && c.done.ExitCode == 0 {
				continue
			}
			w.step(ctx, pod, c, now)
			// One that has just completed lets the next start now.
			held = c.done == nil || c.done.ExitCode != 0
		case held:
			w.apply(ctx, pod, c, event{kind: evInitPending}, now)
		default:
			w.initialized = true
			w.step(ctx, pod, c, now)
		}
	}
	w.endSidecarsOfTerminal(ctx, pod, now)
	w.write(ctx, pod)
	w.recordLocal(pod)
	return nil
}

// allEnded reports whether every regular container of the pod ended for
// good: the pod Succeeded or Failed, and its deadline no longer applies.
func (w *Worker) allEnded() bool {
	regular := 0
	for _, c := range w.containers {
		if c.init || c.ephemeral {
			continue
		}
		regular++
		if c.state() != stateTerminated {
			return false
		}
	}
	return regular > 0
}

// sidecarStarted reports whether sidecar c started: running, its postStart
// hook done (it runs within the start) and its startup probe, if any, passed.
func (w *Worker) sidecarStarted(c *container) bool {
	return c.phase == phaseRunning && (c.spec.StartupProbe == nil || w.verdict(c, probe.Startup))
}

// terminal reports whether the pod ended for good: its regular containers
// all ended for good, or an init container that must end failed and may not
// run again. Its sidecars do not run then.
func (w *Worker) terminal() bool {
	if w.allEnded() {
		return true
	}
	return slices.ContainsFunc(w.containers, func(c *container) bool {
		return c.init && !c.sidecar && c.state() == stateTerminated && c.done.ExitCode != 0
	})
}

// endSidecarsOfTerminal stops the pod's sidecars once the pod is terminal,
// in reverse order, as the kubelet does: the pod is then Succeeded or
// Failed by its other containers alone. A sidecar a previous agent left
// running is adopted first, so that it is stopped too.
func (w *Worker) endSidecarsOfTerminal(ctx context.Context, pod *corev1.Pod, now time.Time) {
	if w.sidecarsEnded || !w.terminal() {
		return
	}
	w.sidecarsEnded = true
	var sidecars []*container
	for _, c := range w.containers {
		if !c.sidecar {
			continue
		}
		if c.phase == phaseNew {
			w.adopt(ctx, pod, c, now)
		}
		sidecars = append(sidecars, c)
	}
	if len(sidecars) > 0 {
		klog.V(2).InfoS("Stopping the sidecars of a pod that ended", "pod", klog.KObj(pod), "sidecars", len(sidecars))
		w.stopFor(pod, sidecars, gracePeriod(pod))
	}
}

// podNotReady records why the pod's sandbox, network or volumes could not
// be made: an event when the reason changes, and every container not yet
// running waits with it (ContainerCreating, or CreateContainerConfigError for
// a pod this node cannot run). Setup is tried again on the next sync.
func (w *Worker) podNotReady(ctx context.Context, pod *corev1.Pod, err error, now time.Time) {
	reason := ReasonContainerCreating
	switch {
	case errors.Is(err, errConfig):
		reason = ReasonCreateContainerConfigError
	case imageReason(err) != "":
		// An image volume's image: its pull sent its own events.
		reason = imageReason(err)
		w.setupErr = err.Error()
	}
	if w.setupErr != err.Error() {
		w.setupErr = err.Error()
		eventReason := "FailedCreatePodSandBox"
		if reason == ReasonCreateContainerConfigError {
			eventReason = "Failed"
		}
		w.host.Event(pod, corev1.EventTypeWarning, eventReason, "%v", err)
	}
	for _, c := range w.containers {
		w.apply(ctx, pod, c, event{kind: evSetupFailed, waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}}, now)
	}
}

// step feeds container c what the worker observes of it at now: once, a run
// a previous agent left; then the end of the current run, or a failed
// liveness probe while it goes on; then a sync, which starts it when due.
func (w *Worker) step(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) {
	if c.phase == phaseNew {
		w.adopt(ctx, pod, c, now)
	}
	if c.run != nil {
		select {
		case <-c.run.Done():
			w.ended(ctx, pod, c, now)
		default:
			if c.probed() && c.phase == phaseRunning && !w.verdict(c, probe.Liveness) {
				w.apply(ctx, pod, c, event{kind: evLivenessFailed}, now)
			}
			return
		}
	}
	w.apply(ctx, pod, c, event{kind: evSync}, now)
}

// apply moves c through the transition of ev and does what it asks; what
// an action answers (the runtime's start, a postStart hook's failure) is
// the next event, fed once the transition before it is done.
func (w *Worker) apply(ctx context.Context, pod *corev1.Pod, c *container, ev event, now time.Time) {
	for queue := []event{ev}; len(queue) > 0; queue = queue[1:] {
		var actions []action
		c.lifecycle, actions = transition(c.lifecycle, queue[0], now)
		for _, a := range actions {
			if next, ok := w.do(ctx, pod, c, a, now); ok {
				queue = append(queue, next)
			}
		}
	}
}

// do does action a for container c, and returns the event it answers with,
// if any.
func (w *Worker) do(ctx context.Context, pod *corev1.Pod, c *container, a action, now time.Time) (event, bool) {
	switch a.kind {
	case actEvent:
		w.host.Event(pod, a.eventType, a.reason, a.format, a.args...)
	case actStart:
		return w.start(ctx, pod, c), true
	case actStartProbes:
		// The environment the run was made with (its ConfigMaps and
		// Secrets read once); a run adopted with an environment that
		// could not be made gets no probes.
		if c.runSpec != nil && c.runSpec.Env != nil {
			w.startProbes(ctx, pod, c, c.runSpec.Env)
		}
	case actStopProbes:
		w.stopProbes(c)
	case actKill:
		// Stopping (the preStop hook included) takes up to the grace
		// period; the end wakes the worker, which restarts the
		// container then.
		stop, deadline := w.stopperOf(pod, c, true), now.Add(killGrace(pod, c))
		go func() {
			stop.stop(deadline, true, nil)
			w.Poke()
		}()
	case actPostStart:
		return w.postStart(ctx, pod, c)
	}
	return event{}, false
}

// start asks the runtime for a run of c: its answer is evStarted, or
// evStartFailed with why.
func (w *Worker) start(ctx context.Context, pod *corev1.Pod, c *container) event {
	img, err := w.image(ctx, pod, c)
	var env []string
	var expand func(string) string
	if err == nil {
		env, expand, err = w.env(ctx, pod, c, img)
	}
	var cfg *runtime.ContainerConfig
	if err == nil {
		cfg, err = w.containerConfig(pod, c, env, expand, img)
	}
	if err != nil {
		return event{kind: evStartFailed, err: err}
	}
	pruneRunLogs(w.podDir(pod), c.spec.Name, c.restarts)
	run, err := w.node.Runtime.Start(ctx, cfg)
	if err != nil {
		return event{kind: evStartFailed, err: err, attempted: true}
	}
	c.run, c.runSpec, c.image = run, cfg, img
	c.running = c.spec.Resources.DeepCopy()
	return event{kind: evStarted}
}

// adopt looks for the run of c a previous agent left: still running, it
// goes on (no restart); ended while no agent watched, its end is counted
// once.
func (w *Worker) adopt(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) {
	cfg := w.containerRef(pod, c)
	run, ok := w.node.Runtime.Adopt(cfg)
	ev := event{kind: evNoLeftover}
	if ok {
		select {
		case <-run.Done():
			if run.Exit().Run >= c.restarts { // else an end the previous agent counted already
				ev = event{kind: evLeftoverEnded}
			}
		default:
			ev = event{kind: evLeftoverRunning, id: run.ID()}
			c.reported, _ = reportedOf(pod, c.spec.Name, run.ID())
		}
	}
	if ev.kind != evNoLeftover {
		c.run, c.runSpec, c.running = run, cfg, c.spec.Resources.DeepCopy()
		if !w.hostRoot(pod) && w.node.Images != nil {
			c.image, _ = w.node.Images.present(&c.spec)
		}
		cfg.LogPath, cfg.WorkingDir = w.logPath(pod, c), c.spec.WorkingDir
		if env, _, err := w.env(ctx, pod, c, c.image); err == nil && c.probed() {
			cfg.Env = env
		}
	}
	w.apply(ctx, pod, c, ev, now)
}

// ended reads how c's run ended and feeds it to the lifecycle, which
// decides whether and when it runs again.
func (w *Worker) ended(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) {
	w.apply(ctx, pod, c, w.exited(pod, c), now)
}

// exited is the end of c's run that ended, as the lifecycle hears it; the
// run is over for the worker.
func (w *Worker) exited(pod *corev1.Pod, c *container) event {
	term := w.terminated(pod, c)
	c.run = nil
	return event{kind: evExited, term: term, pod: pod}
}

// terminated is how c's run ended, as the Pod API shows it: the exit, and
// the container's termination message (or, without one, the runtime's).
func (w *Worker) terminated(pod *corev1.Pod, c *container) *corev1.ContainerStateTerminated {
	exit := c.run.Exit()
	msgPath := c.spec.TerminationMessagePath
	if w.node.Runtime.Isolated() {
		msgPath = terminationLogPath(c.runSpec.Dir, exit.Run)
	}
	message := terminationMessage(&c.spec, msgPath, w.logPath(pod, c), exit.ExitCode)
	if message == "" {
		message = exit.Message
	}
	if w.node.Runtime.Isolated() {
		_ = os.Remove(msgPath)
	}
	return terminatedState(c.run.ID(), exit, message)
}
