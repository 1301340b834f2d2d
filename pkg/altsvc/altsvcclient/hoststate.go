package altsvcclient

import "time"

// State is what the pool currently thinks of a host.
type State string

const (
	// StateUsable: nothing speaks against the host.
	StateUsable State = "Usable"
	// StateUnreachable: the host failed at the network level; it is left out
	// until the block ends, except as a last resort.
	StateUnreachable State = "Unreachable"
	// StateInitializing: the host refused a request as not ready (KEP-3028);
	// it is left out for its Retry-After.
	StateInitializing State = "Initializing"
	// StateRejected: the host's certificate did not verify; it is never used
	// again by this process.
	StateRejected State = "Rejected"
)

// hostStates are every State, for the transition table's completeness test.
var hostStates = []State{StateUsable, StateUnreachable, StateInitializing, StateRejected}

// hostEventKind is what happened to a host. Today the attempts of requests
// produce every event; an active health check would feed the same events
// (an answer to a probe is hostAnswered), and so would a hedged read.
type hostEventKind int

const (
	// hostAnswered: the host answered a request (any status but a KEP-3028
	// refusal).
	hostAnswered hostEventKind = iota
	// hostUnreachable: the host could not be reached or the connection broke
	// (NetworkFailure).
	hostUnreachable
	// hostNotReady: the host refused a request as not yet initialized
	// (NotReadyFailure); the event carries its Retry-After.
	hostNotReady
	// hostCertificateRejected: the host's certificate did not verify
	// (CertificateFailure).
	hostCertificateRejected
)

// hostEventKinds are every hostEventKind, for the completeness test.
var hostEventKinds = []hostEventKind{hostAnswered, hostUnreachable, hostNotReady, hostCertificateRejected}

func (k hostEventKind) String() string {
	switch k {
	case hostAnswered:
		return "Answered"
	case hostUnreachable:
		return "Unreachable"
	case hostNotReady:
		return "NotReady"
	case hostCertificateRejected:
		return "CertificateRejected"
	}
	return "Unknown"
}

// hostEvent is one thing that happened to a host.
type hostEvent struct {
	kind hostEventKind
	// wait is a hostNotReady event's Retry-After; 0 or more than the block
	// duration means the block duration.
	wait time.Duration
	// err is a failure's message, kept for HostState.LastError.
	err string
}

// eventFor is the host event of an attempt's failure; ok is false for a
// failure that says nothing about the host.
func eventFor(f Failure, err error, wait time.Duration) (ev hostEvent, ok bool) {
	switch f {
	case NetworkFailure:
		ev.kind = hostUnreachable
	case NotReadyFailure:
		ev.kind, ev.wait = hostNotReady, wait
	case CertificateFailure:
		ev.kind = hostCertificateRejected
	default:
		return hostEvent{}, false
	}
	if err != nil {
		ev.err = err.Error()
	}
	return ev, true
}

// hostHealth is the part of a host's record that its events change.
type hostHealth struct {
	state   State
	until   time.Time // end of an Unreachable or Initializing block
	lastErr string
}

// stateAt is the state at now: a block that has ended is Usable.
func (h hostHealth) stateAt(now time.Time) State {
	if (h.state == StateUnreachable || h.state == StateInitializing) && !now.Before(h.until) {
		return StateUsable
	}
	return h.state
}

// transition is the host state machine: the health of a host after ev at
// now. A network failure blocks the host for block; a not-ready answer for
// its Retry-After, at most block; a certificate failure for good, and
// nothing brings a rejected host back (its last error is still recorded).
// Any answer ends a block. Time alone also ends a block (stateAt), so an
// Unreachable host becomes Usable again without an event.
func transition(h hostHealth, ev hostEvent, now time.Time, block time.Duration) hostHealth {
	if h.state == StateRejected {
		if ev.kind != hostAnswered && ev.err != "" {
			h.lastErr = ev.err
		}
		return h
	}
	lastErr := h.lastErr
	if ev.err != "" {
		lastErr = ev.err
	}
	switch ev.kind {
	case hostAnswered:
		return hostHealth{state: StateUsable}
	case hostUnreachable:
		return hostHealth{state: StateUnreachable, until: now.Add(block), lastErr: lastErr}
	case hostNotReady:
		wait := ev.wait
		if wait <= 0 || wait > block {
			wait = block
		}
		return hostHealth{state: StateInitializing, until: now.Add(wait), lastErr: lastErr}
	case hostCertificateRejected:
		return hostHealth{state: StateRejected, lastErr: lastErr}
	}
	return h
}
