// Package podstatus computes the pod status fields a node agent owns, as pure
// functions of the pod spec and the container statuses, with the kubelet's
// semantics (pkg/kubelet/status/generate.go) and Pod Ready++: a pod is Ready
// when its containers are ready AND every readiness gate's condition is True.
// Reasons and messages are the kubelet's, word for word, so that kubectl and
// controllers read them as they would from a kubelet.
package podstatus

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// Reasons, as the kubelet writes them.
const (
	ContainersNotReady       = "ContainersNotReady"
	ContainersNotInitialized = "ContainersNotInitialized"
	ReadinessGatesNotReady   = "ReadinessGatesNotReady"
	PodCompleted             = "PodCompleted"
	PodFailed                = "PodFailed"
)

// Messages, as the kubelet writes them.
const (
	msgUnknownContainers    = "containers with unknown status: %s"
	msgUnreadyContainers    = "containers with unready status: %s"
	msgIncompleteContainers = "containers with incomplete status: %s"
	msgGateMissing          = "corresponding condition of pod readiness gate %q does not exist."
	msgGateNotTrue          = "the status of pod readiness gate %q is not \"True\", but %v"
)

// OwnedConditions are the condition types a node agent writes; every other
// condition (readiness gates among them) belongs to someone else.
var OwnedConditions = []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady,
	corev1.PodResizePending, corev1.PodResizeInProgress}

// ContainersReady returns the ContainersReady condition: True when every
// sidecar and every regular container has a status and is ready.
// initStatuses are the init containers' statuses (sidecars among them).
func ContainersReady(pod *corev1.Pod, initStatuses, statuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	if cond, ok := terminal(corev1.ContainersReady, phase); ok {
		return cond
	}
	var unknown, unready []string
	for _, c := range pod.Spec.InitContainers {
		if !podutil.IsRestartableInitContainer(&c) {
			continue
		}
		if s, ok := find(initStatuses, c.Name); !ok {
			unknown = append(unknown, c.Name)
		} else if !s.Ready {
			unready = append(unready, c.Name)
		}
	}
	for _, c := range pod.Spec.Containers {
		s, ok := find(statuses, c.Name)
		switch {
		case !ok:
			unknown = append(unknown, c.Name)
		case !s.Ready:
			unready = append(unready, c.Name)
		}
	}
	return fromContainers(corev1.ContainersReady, ContainersNotReady, unknown, msgUnreadyContainers, unready)
}

// Ready returns the Ready condition. While the containers are not ready it
// copies ContainersReady (reason and message included); otherwise each
// readiness gate is checked against conditions, and a gate whose condition is
// missing or not True makes the pod not ready, with one message per gate
// joined by ", ".
func Ready(pod *corev1.Pod, conditions []corev1.PodCondition, initStatuses, statuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	cr := ContainersReady(pod, initStatuses, statuses, phase)
	if cr.Status != corev1.ConditionTrue {
		return corev1.PodCondition{Type: corev1.PodReady, Status: cr.Status, Reason: cr.Reason, Message: cr.Message}
	}
	var msgs []string
	for _, g := range pod.Spec.ReadinessGates {
		c, ok := findCondition(conditions, g.ConditionType)
		switch {
		case !ok:
			msgs = append(msgs, fmt.Sprintf(msgGateMissing, string(g.ConditionType)))
		case c.Status != corev1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf(msgGateNotTrue, string(g.ConditionType), c.Status))
		}
	}
	if len(msgs) > 0 {
		return corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: ReadinessGatesNotReady, Message: strings.Join(msgs, ", ")}
	}
	return corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
}

// Initialized returns the Initialized condition: True once every init
// container that must end has terminated with exit code 0 and every sidecar
// has started (or the pod has none), and from then on: once a regular
// container ran, a sidecar that restarts does not make the pod uninitialized.
func Initialized(pod *corev1.Pod, initStatuses, statuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	if phase == corev1.PodSucceeded {
		return corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, Reason: PodCompleted}
	}
	if anyRegularStarted(pod, statuses) {
		return corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}
	}
	var unknown, incomplete []string
	for _, c := range pod.Spec.InitContainers {
		s, ok := find(initStatuses, c.Name)
		switch {
		case !ok:
			unknown = append(unknown, c.Name)
		case podutil.IsRestartableInitContainer(&c):
			if s.Started == nil || !*s.Started {
				incomplete = append(incomplete, c.Name)
			}
		case s.State.Terminated == nil || s.State.Terminated.ExitCode != 0:
			incomplete = append(incomplete, c.Name)
		}
	}
	return fromContainers(corev1.PodInitialized, ContainersNotInitialized, unknown, msgIncompleteContainers, incomplete)
}

// Phase returns the pod phase from its container statuses, as the kubelet's
// getPhase does for a pod that is not terminal: init containers that must end
// hold the pod Pending until they succeeded (or fail it when they may not run
// again); sidecars (init containers with restartPolicy Always) hold it Pending
// until they started, unless a regular container ran already, and count as
// running but never as ended; regular containers decide the rest, each under
// its own restart policy if it has one, else the pod's. initialized says
// the node ran a regular container of the pod already (a sidecar that
// restarts then does not make the pod Pending again).
func Phase(pod *corev1.Pod, initStatuses, statuses []corev1.ContainerStatus, initialized bool) corev1.PodPhase {
	var t phaseTally
	for _, c := range pod.Spec.InitContainers {
		s, ok := find(initStatuses, c.Name)
		if podutil.IsRestartableInitContainer(&c) {
			t.sidecar(s, ok)
		} else {
			t.init(pod, c, s, ok)
		}
	}
	for _, c := range pod.Spec.Containers {
		s, ok := find(statuses, c.Name)
		t.regular(pod, c, s, ok)
	}
	if t.failedInitForGood > 0 {
		return corev1.PodFailed
	}
	switch {
	case t.pendingInit > 0 || t.pendingSidecars > 0 && !initialized && !anyRegularStarted(pod, statuses) || t.waiting > 0:
		return corev1.PodPending
	case t.running > 0 && t.unknown == 0:
		return corev1.PodRunning
	case t.running == 0 && t.stopped > 0 && t.unknown == 0:
		switch {
		case t.stopped != t.stoppedForGood:
			return corev1.PodRunning // some restart
		case t.stopped == t.succeeded:
			return corev1.PodSucceeded
		}
		return corev1.PodFailed
	}
	return corev1.PodPending
}

// phaseTally counts a pod's containers by what their statuses say, for
// Phase.
type phaseTally struct {
	pendingInit, pendingSidecars, failedInitForGood               int
	running, waiting, stopped, stoppedForGood, succeeded, unknown int
}

// sidecar counts a restartable init container (status s, if ok): its ends
// never decide the phase.
func (t *phaseTally) sidecar(s corev1.ContainerStatus, ok bool) {
	switch {
	case !ok:
		t.pendingSidecars++
		t.unknown++
	case s.State.Running != nil:
		if s.Started == nil || !*s.Started {
			t.pendingSidecars++
		}
		t.running++
	case s.State.Terminated != nil, s.State.Waiting != nil && s.LastTerminationState.Terminated != nil:
		// Ended, or waiting to restart: not counted.
	case s.State.Waiting != nil:
		t.pendingSidecars++
		t.waiting++
	default:
		t.pendingSidecars++
		t.unknown++
	}
}

// init counts an init container c of pod that must end (status s, if ok).
func (t *phaseTally) init(pod *corev1.Pod, c corev1.Container, s corev1.ContainerStatus, ok bool) {
	var last *corev1.ContainerStateTerminated
	switch {
	case !ok:
	case s.State.Terminated != nil:
		last = s.State.Terminated
	case s.State.Waiting != nil:
		last = s.LastTerminationState.Terminated
	}
	switch {
	case last == nil || s.State.Running != nil:
		t.pendingInit++
	case last.ExitCode != 0 && !podutil.ContainerShouldRestart(c, pod.Spec, last.ExitCode):
		t.failedInitForGood++
	}
}

// regular counts a regular container c of pod (status s, if ok).
func (t *phaseTally) regular(pod *corev1.Pod, c corev1.Container, s corev1.ContainerStatus, ok bool) {
	var last *corev1.ContainerStateTerminated
	switch {
	case !ok:
		t.unknown++
	case s.State.Running != nil:
		t.running++
	case s.State.Terminated != nil:
		last = s.State.Terminated
	case s.State.Waiting != nil && s.LastTerminationState.Terminated != nil:
		last = s.LastTerminationState.Terminated
	case s.State.Waiting != nil:
		t.waiting++
	default:
		t.unknown++
	}
	if last == nil {
		return
	}
	t.stopped++
	if !podutil.ContainerShouldRestart(c, pod.Spec, last.ExitCode) {
		t.stoppedForGood++
	}
	if s.State.Terminated != nil && last.ExitCode == 0 {
		t.succeeded++
	}
}

// anyRegularStarted reports whether a regular container of pod has run: the
// pod was initialized, whatever its sidecars do since.
func anyRegularStarted(pod *corev1.Pod, statuses []corev1.ContainerStatus) bool {
	for _, c := range pod.Spec.Containers {
		if s, ok := find(statuses, c.Name); ok && (s.State.Running != nil || s.State.Terminated != nil) {
			return true
		}
	}
	return false
}

// WithTransitionTimes returns conditions with lastTransitionTime kept from
// old when a condition's status did not change, and set to now when it did.
func WithTransitionTimes(conditions, old []corev1.PodCondition, now metav1.Time) []corev1.PodCondition {
	out := make([]corev1.PodCondition, len(conditions))
	for i, c := range conditions {
		if prev, ok := findCondition(old, c.Type); ok && prev.Status == c.Status && !prev.LastTransitionTime.IsZero() {
			c.LastTransitionTime = prev.LastTransitionTime
		} else {
			c.LastTransitionTime = now
		}
		out[i] = c
	}
	return out
}

// IsOwned reports whether the agent owns condition type t.
func IsOwned(t corev1.PodConditionType) bool { return slices.Contains(OwnedConditions, t) }

func terminal(t corev1.PodConditionType, phase corev1.PodPhase) (corev1.PodCondition, bool) {
	switch phase {
	case corev1.PodSucceeded:
		return corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: PodCompleted}, true
	case corev1.PodFailed:
		return corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: PodFailed}, true
	}
	return corev1.PodCondition{}, false
}

func find(statuses []corev1.ContainerStatus, name string) (corev1.ContainerStatus, bool) {
	for _, s := range statuses {
		if s.Name == name {
			return s, true
		}
	}
	return corev1.ContainerStatus{}, false
}

func findCondition(conditions []corev1.PodCondition, t corev1.PodConditionType) (corev1.PodCondition, bool) {
	for _, c := range conditions {
		if c.Type == t {
			return c, true
		}
	}
	return corev1.PodCondition{}, false
}

// list formats names as the kubelet does: "[a b]".
func list(names []string) string { return "[" + strings.Join(names, " ") + "]" }

// fromContainers is condition t as the kubelet words it from the
// containers it lacks: False with reason when some have no status
// (unknown) or are not there yet (notYet, said by notYetMsg), True
// otherwise.
func fromContainers(t corev1.PodConditionType, reason string, unknown []string, notYetMsg string, notYet []string) corev1.PodCondition {
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf(msgUnknownContainers, list(unknown)))
	}
	if len(notYet) > 0 {
		msgs = append(msgs, fmt.Sprintf(notYetMsg, list(notYet)))
	}
	if len(msgs) > 0 {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason, Message: strings.Join(msgs, ", ")}
	}
	return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue}
}
