package podworker

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodTransition is the pod's life, row by row: what each event does in
// each state, and what the worker does for it.
func TestPodTransition(t *testing.T) {
	running, ended, finished := podLife{state: podRunning}, podLife{state: podEnded, reason: ReasonEvicted, message: "disk"}, podLife{state: podFinished}
	act := func(k podActionKind, g grace) podAction { return podAction{kind: k, grace: g} }
	evicted := podAction{kind: podActEnd, grace: graceNone, eventType: corev1.EventTypeWarning, reason: ReasonEvicted, message: "over its emptyDir"}
	deadline := podAction{kind: podActEnd, grace: gracePod, eventType: corev1.EventTypeNormal, reason: ReasonDeadlineExceeded, message: messageDeadlineExceeded}
	for _, tc := range []struct {
		name string
		from podLife
		ev   podEvent
		to   podLife
		acts []podAction
	}{
		{"a running pod syncs", running, podEvent{kind: podSync}, running, []podAction{act(podActSync, graceNone)}},
		{"past its deadline: ended with the pod's grace", running, podEvent{kind: podDeadline},
			podLife{state: podEnded, reason: ReasonDeadlineExceeded, message: messageDeadlineExceeded}, []podAction{deadline}},
		{"evicted: ended at once, with why", running, podEvent{kind: podEvicted, message: "over its emptyDir"},
			podLife{state: podEnded, reason: ReasonEvicted, message: "over its emptyDir"}, []podAction{evicted}},
		{"deleted: terminated", running, podEvent{kind: podDeleting}, finished, []podAction{act(podActTerminate, graceNone)}},
		{"retired: stopped with its grace", running, podEvent{kind: podRetired}, finished, []podAction{act(podActStop, gracePod)}},
		{"gone from the API: stopped at once", running, podEvent{kind: podGone}, finished, []podAction{act(podActStop, graceNone)}},
		{"the agent stops with its pods", running, podEvent{kind: podAgentStops}, finished, []podAction{act(podActStopForAgent, graceNone)}},
		{"the agent leaves its pods running", running, podEvent{kind: podAgentLeaves}, finished, nil},

		{"an ended pod does not sync", ended, podEvent{kind: podSync}, ended, nil},
		{"an ended pod is not ended again", ended, podEvent{kind: podEvicted, message: "again"}, ended, nil},
		{"nor by its deadline", ended, podEvent{kind: podDeadline}, ended, nil},
		{"an ended pod's deletion terminates it", ended, podEvent{kind: podDeleting}, podLife{state: podFinished, reason: ReasonEvicted, message: "disk"}, []podAction{act(podActTerminate, graceNone)}},
		{"an ended pod gone from the API", ended, podEvent{kind: podGone}, podLife{state: podFinished, reason: ReasonEvicted, message: "disk"}, []podAction{act(podActStop, graceNone)}},
		{"the agent stops beside an ended pod", ended, podEvent{kind: podAgentStops}, podLife{state: podFinished, reason: ReasonEvicted, message: "disk"}, []podAction{act(podActStopForAgent, graceNone)}},

		{"a finished pod hears nothing", finished, podEvent{kind: podDeleting}, finished, nil},
	} {
		to, acts := podTransition(tc.from, tc.ev)
		if to != tc.to || !slices.Equal(acts, tc.acts) {
			t.Errorf("%s: %v on %v gives %+v %+v, want %+v %+v", tc.name, tc.from.state, tc.ev.kind, to, acts, tc.to, tc.acts)
		}
	}
}

// TestPodTransitionCovered checks that every state has a defined answer to
// every event: the transition never leaves Finished, Ended is left only
// for Finished, and every move to Finished or Ended comes with an action
// but the agent leaving its pods.
func TestPodTransitionCovered(t *testing.T) {
	for _, s := range podStates {
		for _, k := range podEventKinds {
			to, acts := podTransition(podLife{state: s}, podEvent{kind: k, message: "m"})
			switch {
			case s == podFinished && (to.state != podFinished || len(acts) != 0):
				t.Errorf("%v on %v: left Finished (%v, %v)", s, k, to.state, acts)
			case s == podEnded && to.state == podRunning:
				t.Errorf("%v on %v: an ended pod runs again", s, k)
			case to.state != s && to.state != podRunning && len(acts) == 0 && k != podAgentLeaves:
				t.Errorf("%v on %v: moved to %v doing nothing", s, k, to.state)
			}
			if s.String() == "" || k.String() == "" {
				t.Errorf("unnamed %d or %d", s, k)
			}
		}
	}
}

// TestObserve: the order in which a turn sees what it was told, as the
// worker's loop always had it.
func TestObserve(t *testing.T) {
	pod := &corev1.Pod{}
	deleting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{Time: time.Now()}}}
	evict := podEvent{kind: podEvicted, message: "m"}
	for _, tc := range []struct {
		name               string
		pod                *corev1.Pod
		asked              podEvent
		stopping, stopPods bool
		want               podEventKind
	}{
		{"nothing: a sync", pod, podEvent{}, false, true, podSync},
		{"gone beats everything", deleting, podEvent{kind: podGone}, true, true, podGone},
		{"retired beats the agent's stop", pod, podEvent{kind: podRetired}, true, true, podRetired},
		{"the agent's stop beats a deletion", deleting, evict, true, true, podAgentStops},
		{"leaving the pods running", deleting, evict, true, false, podAgentLeaves},
		{"a deletion beats an eviction", deleting, evict, false, true, podDeleting},
		{"an eviction", pod, evict, false, true, podEvicted},
	} {
		if got := observe(tc.pod, tc.asked, tc.stopping, tc.stopPods); got.kind != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got.kind, tc.want)
		}
	}
}

// TestAskKeepsTheMostPressing: a pod gone from the API is not merely
// retired or evicted after.
func TestAskKeepsTheMostPressing(t *testing.T) {
	w := &Worker{wake: make(chan struct{}, 1)}
	w.RequestEviction("disk")
	w.Retire()
	w.Delete()
	w.Retire()
	w.RequestEviction("again")
	if w.asked.kind != podGone {
		t.Errorf("asked %v, want Gone", w.asked.kind)
	}
	e := &Worker{wake: make(chan struct{}, 1)}
	e.RequestEviction("disk")
	if e.asked != (podEvent{kind: podEvicted, message: "disk"}) {
		t.Errorf("asked %+v, want the eviction with its message", e.asked)
	}
}
