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
// regular container has a status and is ready.
func ContainersReady(pod *corev1.Pod, statuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	if cond, ok := terminal(corev1.ContainersReady, phase); ok {
		return cond
	}
	var unknown, unready []string
	for _, c := range pod.Spec.Containers {
		s, ok := find(statuses, c.Name)
		switch {
		case !ok:
			unknown = append(unknown, c.Name)
		case !s.Ready:
			unready = append(unready, c.Name)
		}
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf(msgUnknownContainers, list(unknown)))
	}
	if len(unready) > 0 {
		msgs = append(msgs, fmt.Sprintf(msgUnreadyContainers, list(unready)))
	}
	if len(msgs) > 0 {
		return corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: ContainersNotReady, Message: strings.Join(msgs, ", ")}
	}
	return corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}
}

// Ready returns the Ready condition. While the containers are not ready it
// copies ContainersReady (reason and message included); otherwise each
// readiness gate is checked against conditions, and a gate whose condition is
// missing or not True makes the pod not ready, with one message per gate
// joined by ", ".
func Ready(pod *corev1.Pod, conditions []corev1.PodCondition, statuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	cr := ContainersReady(pod, statuses, phase)
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
// container has terminated with exit code 0 (or the pod has none).
func Initialized(pod *corev1.Pod, initStatuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	if phase == corev1.PodSucceeded {
		return corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, Reason: PodCompleted}
	}
	var unknown, incomplete []string
	for _, c := range pod.Spec.InitContainers {
		s, ok := find(initStatuses, c.Name)
		switch {
		case !ok:
			unknown = append(unknown, c.Name)
		case s.State.Terminated == nil || s.State.Terminated.ExitCode != 0:
			incomplete = append(incomplete, c.Name)
		}
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf(msgUnknownContainers, list(unknown)))
	}
	if len(incomplete) > 0 {
		msgs = append(msgs, fmt.Sprintf(msgIncompleteContainers, list(incomplete)))
	}
	if len(msgs) > 0 {
		return corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, Reason: ContainersNotInitialized, Message: strings.Join(msgs, ", ")}
	}
	return corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}
}

// Phase returns the pod phase from its container statuses and restart
// policy, as the kubelet's getPhase does for pods without sidecars.
func Phase(pod *corev1.Pod, initStatuses, statuses []corev1.ContainerStatus) corev1.PodPhase {
	policy := pod.Spec.RestartPolicy
	for _, c := range pod.Spec.InitContainers {
		s, ok := find(initStatuses, c.Name)
		if !ok || s.State.Terminated == nil {
			return corev1.PodPending
		}
		if s.State.Terminated.ExitCode != 0 {
			if policy == corev1.RestartPolicyNever {
				return corev1.PodFailed
			}
			return corev1.PodPending
		}
	}
	var running, waiting, stopped, succeeded, unknown int
	for _, c := range pod.Spec.Containers {
		s, ok := find(statuses, c.Name)
		switch {
		case !ok:
			unknown++
		case s.State.Running != nil:
			running++
		case s.State.Terminated != nil:
			stopped++
			if s.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case s.State.Waiting != nil:
			if s.LastTerminationState.Terminated != nil {
				stopped++
			} else {
				waiting++
			}
		default:
			unknown++
		}
	}
	n := len(pod.Spec.Containers)
	switch {
	case waiting > 0 || unknown > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped == n && n > 0:
		switch {
		case policy == corev1.RestartPolicyAlways:
			return corev1.PodRunning // restarting
		case succeeded == stopped:
			return corev1.PodSucceeded
		case policy == corev1.RestartPolicyNever:
			return corev1.PodFailed
		default:
			return corev1.PodRunning // OnFailure: the failed ones restart
		}
	}
	return corev1.PodPending
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
