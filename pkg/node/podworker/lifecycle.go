package podworker

import (
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// phase is where a container is in its lifecycle, as the agent runs it.
type phase int

const (
	// phaseNew: the agent has not yet looked for a run a previous agent
	// left. Its Pod API state is terminated when a previous agent reported
	// it finished for good (done), waiting otherwise.
	phaseNew phase = iota
	// phaseWaiting: to be started at the next sync (ContainerCreating,
	// PodInitializing, a setup error, or a restart due at once).
	phaseWaiting
	// phaseStarting: a start was decided; the runtime's answer is due.
	phaseStarting
	// phaseRunning: a run is under way.
	phaseRunning
	// phaseKilling: the run is being stopped for a failed liveness probe;
	// its end is due.
	phaseKilling
	// phaseBackingOff: waiting until notBefore to start again, after a
	// crash (CrashLoopBackOff) or a start that failed (10s).
	phaseBackingOff
	// phaseTerminated: ended for good under the pod's restart policy.
	phaseTerminated
)

// phases lists every phase, for the tests that check the transition table
// is complete.
var phases = []phase{phaseNew, phaseWaiting, phaseStarting, phaseRunning, phaseKilling, phaseBackingOff, phaseTerminated}

func (p phase) String() string {
	switch p {
	case phaseNew:
		return "New"
	case phaseWaiting:
		return "Waiting"
	case phaseStarting:
		return "Starting"
	case phaseRunning:
		return "Running"
	case phaseKilling:
		return "Killing"
	case phaseBackingOff:
		return "BackingOff"
	case phaseTerminated:
		return "Terminated"
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// eventKind is what happened to a container, as the worker observed it.
type eventKind int

const (
	// evSync: a sync reached the container (at now); it starts when due.
	evSync eventKind = iota
	// evNoLeftover: no run of a previous agent was found, or one whose end
	// that agent counted already.
	evNoLeftover
	// evLeftoverRunning: a run a previous agent left goes on (event.id).
	evLeftoverRunning
	// evLeftoverEnded: a run a previous agent left ended while no agent
	// watched; its end is counted next (evExited).
	evLeftoverEnded
	// evStarted: the runtime started a run.
	evStarted
	// evStartFailed: the container could not be started (event.err;
	// event.attempted when the runtime was asked, not for a configuration
	// that could not be made).
	evStartFailed
	// evLivenessFailed: the liveness probe of the running container failed.
	evLivenessFailed
	// evExited: the run ended (event.term) on its own or after a kill.
	evExited
	// evStopped: the run was stopped (event.term) for the pod's deletion,
	// its retirement or the agent's stop.
	evStopped
	// evSetupFailed: the pod's sandbox, network or volumes could not be
	// made (event.waiting is what the container waits with).
	evSetupFailed
	// evInitPending: the pod's init containers have not all completed.
	evInitPending
	// evResizeRestart: an in-place resize changed a resource whose
	// resizePolicy is RestartContainer; the run is stopped, and the next
	// one has the new resources.
	evResizeRestart
)

// eventKinds lists every event, for the tests that check the transition
// table is complete.
var eventKinds = []eventKind{evSync, evNoLeftover, evLeftoverRunning, evLeftoverEnded, evStarted, evStartFailed,
	evLivenessFailed, evExited, evStopped, evSetupFailed, evInitPending, evResizeRestart}

func (k eventKind) String() string {
	switch k {
	case evSync:
		return "Sync"
	case evNoLeftover:
		return "NoLeftover"
	case evLeftoverRunning:
		return "LeftoverRunning"
	case evLeftoverEnded:
		return "LeftoverEnded"
	case evStarted:
		return "Started"
	case evStartFailed:
		return "StartFailed"
	case evLivenessFailed:
		return "LivenessFailed"
	case evExited:
		return "Exited"
	case evStopped:
		return "Stopped"
	case evSetupFailed:
		return "SetupFailed"
	case evInitPending:
		return "InitPending"
	case evResizeRestart:
		return "ResizeRestart"
	}
	return fmt.Sprintf("event(%d)", int(k))
}

// event is one observation of a container, with what the transition needs
// to know of it.
type event struct {
	kind eventKind
	// id is the run's container ID (evLeftoverRunning).
	id string
	// err is why a start failed (evStartFailed), errConfig for a
	// configuration this node cannot run.
	err error
	// attempted is set when the runtime was asked to start (evStartFailed).
	attempted bool
	// term is how the run ended (evExited, evStopped).
	term *corev1.ContainerStateTerminated
	// pod is the container's pod: its restart policy and names (evExited).
	pod *corev1.Pod
	// waiting is what the container waits with (evSetupFailed).
	waiting *corev1.ContainerStateWaiting
}

// actionKind is what the worker does for a transition.
type actionKind int

const (
	// actStart asks the runtime for a run; the answer comes back as
	// evStarted or evStartFailed.
	actStart actionKind = iota
	// actStartProbes runs the container's probes on the current run.
	actStartProbes
	// actStopProbes ends the probes of the run.
	actStopProbes
	// actKill stops the run in the background within the pod's grace
	// period; its end wakes the worker, which sees evExited then.
	actKill
	// actEvent records an event on the pod.
	actEvent
	// actPostStart runs the container's postStart hook on the run just
	// started; a hook that fails stops the run, whose end (evExited) comes
	// back.
	actPostStart
)

// action is one thing the worker does for a transition, in order.
type action struct {
	kind actionKind
	// eventType, reason, format and args make the event of actEvent.
	eventType, reason, format string
	args                      []any
}

// recordEvent is an actEvent action.
func recordEvent(eventType, reason, format string, args ...any) action {
	return action{kind: actEvent, eventType: eventType, reason: reason, format: format, args: args}
}

// lifecycle is one container's lifecycle: its phase and what the Pod API
// shows of it. newWorker makes it; only transition changes it.
type lifecycle struct {
	phase phase
	// name, init and ephemeral are what the container is; they never
	// change. An ephemeral container (kubectl debug) is never restarted.
	name      string
	init      bool
	ephemeral bool
	// sidecar: an init container with restartPolicy Always, which runs
	// beside the regular containers, with probes, and is always restarted.
	sidecar bool
	// postStart: the container has a postStart hook, run after each start.
	postStart bool

	restarts int32
	// startAttempts counts every attempt to start the container, failed
	// ones included; kept in the local record across agent restarts.
	startAttempts int32
	// livenessKills counts the runs stopped for a failed liveness probe
	// (kept in the local record too).
	livenessKills int32
	// resizeRestart: the run was stopped for an in-place resize; it runs
	// again at once, whatever the restart policy and the backoff.
	resizeRestart bool
	// backoff is the crash-loop backoff of the next restart but one.
	backoff time.Duration
	// notBefore: no start before this (crash-loop backoff, or the retry of
	// a start that failed).
	notBefore time.Time
	// waiting is the Pod API's waiting state while no run is under way;
	// nil for the default (ContainerCreating, PodInitializing).
	waiting *corev1.ContainerStateWaiting
	// last is how the previous run ended, while the container restarts.
	last *corev1.ContainerStateTerminated
	// done is how the container ended for good.
	done *corev1.ContainerStateTerminated
}

// startRetry is how long a container whose start failed waits before the
// next attempt.
const startRetry = 10 * time.Second

// transition is the container lifecycle: it returns the state that follows
// s on event ev at time now, and what the worker must do for it, in order.
// It is a pure function: the worker observes (runs, probes, the runtime's
// answers) and acts; the decisions (restart policy, crash-loop backoff,
// liveness kills, adoption, reasons and counts) are all here. An event a
// phase does not expect leaves the state as it is and asks for nothing.
func transition(s lifecycle, ev event, now time.Time) (lifecycle, []action) {
	switch ev.kind {
	case evSync:
		switch s.phase {
		case phaseWaiting, phaseBackingOff:
			if now.Before(s.notBefore) {
				return s, nil
			}
			s.phase = phaseStarting
			return s, []action{{kind: actStart}}
		}
		// New: adoption comes first. Starting: a start is under way.
		// Running, Killing: the run's end comes as evExited. Terminated:
		// for good.
		return s, nil

	case evNoLeftover:
		if s.phase != phaseNew {
			return s, nil
		}
		s.phase = phaseWaiting
		if s.done != nil {
			s.phase = phaseTerminated
		}
		return s, nil

	case evLeftoverRunning:
		if s.phase != phaseNew {
			return s, nil
		}
		// It goes on, not restarted; whatever a previous agent reported
		// as its end is overtaken.
		s.phase = phaseRunning
		acts := []action{recordEvent(corev1.EventTypeNormal, "Adopted", "Container %s (%s) left running by a previous node agent goes on", s.name, ev.id)}
		if s.probed() {
			acts = append(acts, action{kind: actStartProbes})
		}
		return s, acts

	case evLeftoverEnded:
		if s.phase != phaseNew {
			return s, nil
		}
		// Its end is counted once, as if this agent had watched it.
		s.phase = phaseRunning
		return s, nil

	case evStarted:
		if s.phase != phaseStarting {
			return s, nil
		}
		s.phase, s.waiting = phaseRunning, nil
		s.startAttempts++
		acts := []action{recordEvent(corev1.EventTypeNormal, "Started", "Started container %s", s.name)}
		if s.probed() {
			acts = append(acts, action{kind: actStartProbes})
		}
		if s.postStart {
			// As the kubelet: the pod's other containers wait for it.
			acts = append(acts, action{kind: actPostStart})
		}
		return s, acts

	case evStartFailed:
		if s.phase != phaseStarting {
			return s, nil
		}
		if ev.attempted {
			s.startAttempts++
		}
		reason := ReasonRunContainerError
		switch {
		case imageReason(ev.err) != "":
			reason = imageReason(ev.err)
		case errors.Is(ev.err, errConfig):
			reason = ReasonCreateContainerConfigError
		}
		var acts []action
		// One event per error, not one per retry. An image's failure has
		// its own event already (Failed to pull, Back-off pulling): this
		// one names the reason, as the kubelet's "Error: ErrImagePull".
		if s.waiting == nil || s.waiting.Message != ev.err.Error() {
			if r := imageReason(ev.err); r != "" {
				acts = append(acts, recordEvent(corev1.EventTypeWarning, "Failed", "Error: %s", r))
			} else {
				acts = append(acts, recordEvent(corev1.EventTypeWarning, "Failed", "Error: %v", ev.err))
			}
		}
		s.phase = phaseBackingOff
		s.waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: ev.err.Error()}
		s.notBefore = now.Add(startRetry)
		return s, acts

	case evLivenessFailed:
		// Init containers that must end have no liveness probe.
		if s.phase != phaseRunning || !s.probed() {
			return s, nil
		}
		// Stopping takes up to the grace period: the worker goes on with
		// the pod's other containers meanwhile.
		s.phase = phaseKilling
		s.livenessKills++
		return s, []action{
			recordEvent(corev1.EventTypeNormal, "Killing", "Container %s failed liveness probe, will be restarted", s.name),
			{kind: actStopProbes},
			{kind: actKill},
		}

	case evResizeRestart:
		if s.phase != phaseRunning || s.ephemeral {
			return s, nil
		}
		s.phase, s.resizeRestart = phaseKilling, true
		return s, []action{
			recordEvent(corev1.EventTypeNormal, "Killing", "Container %s resize requires restart", s.name),
			{kind: actStopProbes},
			{kind: actKill},
		}

	case evExited:
		if s.phase != phaseRunning && s.phase != phaseKilling {
			return s, nil
		}
		return exited(s, ev.term, ev.pod, now)

	case evStopped:
		if s.phase != phaseRunning && s.phase != phaseKilling {
			return s, nil
		}
		// Stopped with the pod: it does not run again.
		s.phase, s.done = phaseTerminated, ev.term
		return s, nil

	case evSetupFailed:
		// Every container not yet running waits with the pod's setup error.
		switch s.phase {
		case phaseNew:
			if s.done == nil {
				s.waiting = ev.waiting
			}
		case phaseWaiting, phaseStarting, phaseBackingOff:
			s.waiting = ev.waiting
		}
		return s, nil

	case evInitPending:
		// Shown only while the container waits; in any other phase it is
		// overwritten before it could be.
		s.waiting = &corev1.ContainerStateWaiting{Reason: ReasonPodInitializing}
		return s, nil
	}
	return s, nil
}

// probed reports whether the container has probes: every regular container
// and sidecar (the API refuses probes on ephemeral containers and on init
// containers that must end).
func (s lifecycle) probed() bool { return !s.init || s.sidecar }

// shouldRestart reports whether container name of pod (an init container
// when init) runs again after a run that ended with code: never an init
// container that succeeded; otherwise as the kubelet's ContainerShouldRestart
// decides, a sidecar always, a container under its own restartPolicy and
// restartPolicyRules when it has them, else under the pod's restartPolicy.
func shouldRestart(pod *corev1.Pod, name string, init bool, code int32) bool {
	list := pod.Spec.Containers
	if init {
		list = pod.Spec.InitContainers
	}
	var spec corev1.Container // not in the spec: the pod's policy decides
	if i := slices.IndexFunc(list, func(c corev1.Container) bool { return c.Name == name }); i >= 0 {
		spec = list[i]
	}
	if init && !podutil.IsRestartableInitContainer(&spec) && code == 0 {
		return false
	}
	return podutil.ContainerShouldRestart(spec, pod.Spec, code)
}

// exited decides what follows the end term of a run of container s of pod
// at now, as the kubelet does: an init container that succeeded, an
// ephemeral container, or a container the restart policy does not run
// again, is terminated for good;
// any other restarts at once the first time, then after the crash-loop
// backoff (RestartDelay).
func exited(s lifecycle, term *corev1.ContainerStateTerminated, pod *corev1.Pod, now time.Time) (lifecycle, []action) {
	var acts []action
	if term.Reason == ReasonOOMKilled {
		acts = append(acts, recordEvent(corev1.EventTypeWarning, ReasonOOMKilled, "Container %s was killed for exceeding its memory limit", s.name))
	}
	acts = append(acts, action{kind: actStopProbes})
	if s.resizeRestart {
		s.resizeRestart = false
		s.last, s.done, s.waiting = term, nil, nil
		s.restarts++
		s.phase, s.notBefore = phaseWaiting, now
		return s, acts
	}
	if s.ephemeral || !shouldRestart(pod, s.name, s.init, term.ExitCode) {
		s.phase = phaseTerminated
		s.done, s.waiting, s.last = term, nil, nil
		return s, acts
	}
	var delay time.Duration
	delay, s.backoff = RestartDelay(s.backoff, term.FinishedAt.Sub(term.StartedAt.Time))
	s.last, s.done = term, nil
	s.notBefore = now.Add(delay)
	s.restarts++
	s.phase = phaseWaiting
	if delay > 0 {
		s.phase = phaseBackingOff
		s.waiting = &corev1.ContainerStateWaiting{Reason: ReasonCrashLoopBackOff,
			Message: fmt.Sprintf("back-off %v restarting failed container=%s pod=%s_%s(%s)", delay, s.name, pod.Name, pod.Namespace, pod.UID)}
		acts = append(acts, recordEvent(corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s", s.name, pod.Name))
	}
	return s, acts
}

// containerState is where a container is in its lifecycle, as the Pod API
// shows it: waiting (to be created, or to restart after a crash, with a
// reason), running (a run is under way), or terminated (ended for good under
// the pod's restart policy).
type containerState int

const (
	stateWaiting containerState = iota
	stateRunning
	stateTerminated
)

// state is the Pod API's view of s's phase.
func (s lifecycle) state() containerState {
	switch s.phase {
	case phaseRunning, phaseKilling:
		return stateRunning
	case phaseTerminated:
		return stateTerminated
	case phaseNew:
		if s.done != nil {
			return stateTerminated
		}
	}
	return stateWaiting
}
