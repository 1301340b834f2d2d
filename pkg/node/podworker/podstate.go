package podworker

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// podState is where a pod is in its life on the node, as its worker runs
// it (the kubelet's PodWorkerState: SyncPod, TerminatingPod, TerminatedPod,
// with the end the node itself decides named).
type podState int

const (
	// podRunning: its containers follow its spec, a sync at a time.
	podRunning podState = iota
	// podEnded: the node ended it for good (evicted, or past its
	// activeDeadlineSeconds): its containers are stopped, its sandbox
	// released, and nothing runs or is set up again until it is deleted
	// (its controller makes another). It shows Failed with podLife's
	// reason and message.
	podEnded
	// podFinished: its containers were stopped as its end asked (deleted,
	// gone from the API, retired, the agent's stop), or left running for
	// the next agent; the worker returns.
	podFinished
)

// podStates lists every state, for the test that checks the table is
// complete.
var podStates = []podState{podRunning, podEnded, podFinished}

func (s podState) String() string {
	switch s {
	case podRunning:
		return "Running"
	case podEnded:
		return "Ended"
	case podFinished:
		return "Finished"
	}
	return fmt.Sprintf("podState(%d)", int(s))
}

// podEventKind is what happened to a pod, as its worker observes it.
type podEventKind int

const (
	// podSync: a turn (something changed, or a second passed).
	podSync podEventKind = iota
	// podDeadline: a sync found the pod past its activeDeadlineSeconds.
	podDeadline
	// podEvicted: the node evicts the pod (podEvent.message): a sync found
	// its local storage over a limit, or the eviction manager asked.
	podEvicted
	// podDeleting: the API marked the pod for deletion (a
	// deletionTimestamp): it stops within the deletion's grace period.
	podDeleting
	// podRetired: its static manifest changed or went away: it stops with
	// its grace period, and its successor starts after.
	podRetired
	// podGone: it left the API at once, or another pod took its name: it
	// stops now.
	podGone
	// podAgentStops: the agent stops and takes the containers with it
	// (--stop-pods-on-exit).
	podAgentStops
	// podAgentLeaves: the agent stops and leaves the containers running
	// for the next agent to adopt.
	podAgentLeaves
)

// podEventKinds lists every event, for the test that checks the table is
// complete.
var podEventKinds = []podEventKind{podSync, podDeadline, podEvicted, podDeleting, podRetired, podGone, podAgentStops, podAgentLeaves}

func (k podEventKind) String() string {
	switch k {
	case podSync:
		return "Sync"
	case podDeadline:
		return "Deadline"
	case podEvicted:
		return "Evicted"
	case podDeleting:
		return "Deleting"
	case podRetired:
		return "Retired"
	case podGone:
		return "Gone"
	case podAgentStops:
		return "AgentStops"
	case podAgentLeaves:
		return "AgentLeaves"
	}
	return fmt.Sprintf("podEvent(%d)", int(k))
}

// podEvent is one observation of a pod.
type podEvent struct {
	kind podEventKind
	// message says why the node evicts the pod (podEvicted).
	message string
}

// podActionKind is what a worker does for a pod transition.
type podActionKind int

const (
	// podActSync brings the containers one step towards the spec; a sync
	// may find the pod's end (podDeadline, podEvicted), which is the next
	// event.
	podActSync podActionKind = iota
	// podActEnd stops the containers for good within podAction.grace,
	// records why (an event, the Failed status) and releases the sandbox.
	podActEnd
	// podActTerminate stops the containers within the deletion's grace
	// period, writes the final status, releases the sandbox and removes
	// the pod from the API for good (not a static pod's).
	podActTerminate
	// podActStop stops the containers within podAction.grace and
	// releases the sandbox; nothing is written or removed.
	podActStop
	// podActStopForAgent stops the containers with the pod's grace period
	// as the agent stops, records their ends for the next agent (the API,
	// briefly, and the node's record) and releases the pod's addresses.
	podActStopForAgent
)

// grace is how long a stop gives the containers.
type grace int

const (
	// graceNone kills at once.
	graceNone grace = iota
	// gracePod is the pod's terminationGracePeriodSeconds (30s without).
	gracePod
)

// podAction is one thing a worker does for a transition, in order.
type podAction struct {
	kind  podActionKind
	grace grace
	// eventType, reason and message make the event of podActEnd.
	eventType, reason, message string
}

// podLife is a pod's state, and for an ended pod why it ended: the
// reason and message its Failed status shows.
type podLife struct {
	state           podState
	reason, message string
}

// The kubelet's reason and message for a pod past its activeDeadlineSeconds.
const (
	ReasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// podTransition is a pod's life on the node: the state that follows l on
// event ev, and what the worker must do for it, in order. It is a pure
// function: the worker observes (the API's pod, the agent's requests, its
// context) and acts. An ended pod waits for its deletion; a finished pod
// hears nothing more.
func podTransition(l podLife, ev podEvent) (podLife, []podAction) {
	if l.state == podFinished {
		return l, nil
	}
	switch ev.kind {
	case podSync:
		if l.state == podRunning {
			return l, []podAction{{kind: podActSync}}
		}
		return l, nil // ended: nothing runs until the deletion
	case podDeadline, podEvicted:
		if l.state != podRunning {
			return l, nil // it ended already
		}
		end := podAction{kind: podActEnd, grace: gracePod, eventType: corev1.EventTypeNormal, reason: ReasonDeadlineExceeded, message: messageDeadlineExceeded}
		if ev.kind == podEvicted {
			// As the kubelet's eviction manager: at once, for good.
			end = podAction{kind: podActEnd, grace: graceNone, eventType: corev1.EventTypeWarning, reason: ReasonEvicted, message: ev.message}
		}
		return podLife{state: podEnded, reason: end.reason, message: end.message}, []podAction{end}
	case podDeleting:
		l.state = podFinished
		return l, []podAction{{kind: podActTerminate}}
	case podRetired:
		l.state = podFinished
		return l, []podAction{{kind: podActStop, grace: gracePod}}
	case podGone:
		l.state = podFinished
		return l, []podAction{{kind: podActStop, grace: graceNone}}
	case podAgentStops:
		l.state = podFinished
		return l, []podAction{{kind: podActStopForAgent}}
	case podAgentLeaves:
		l.state = podFinished
		return l, nil
	}
	return l, nil
}

// observe is the event of a turn, from what the worker was told: the pod's
// end in the API or from the agent first, a request to evict it, else a
// sync. asked is the most pressing request of the agent's (podGone,
// podRetired, podEvicted; podSync for none); stopping says the agent stops,
// stopPods whether it takes the containers with it.
func observe(pod *corev1.Pod, asked podEvent, stopping, stopPods bool) podEvent {
	switch {
	case asked.kind == podGone || asked.kind == podRetired:
		return asked
	case stopping && stopPods:
		return podEvent{kind: podAgentStops}
	case stopping:
		return podEvent{kind: podAgentLeaves}
	case pod.DeletionTimestamp != nil:
		return podEvent{kind: podDeleting}
	}
	return asked // podEvicted, or podSync
}
