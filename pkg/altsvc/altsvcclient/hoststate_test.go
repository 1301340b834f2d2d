package altsvcclient

import (
	"testing"
	"time"
)

func TestTransition(t *testing.T) {
	now := time.Unix(1000, 0)
	const block = 10 * time.Second
	blockedUntil := now.Add(3 * time.Second)
	from := map[State]hostHealth{
		StateUsable:       {state: StateUsable},
		StateUnreachable:  {state: StateUnreachable, until: blockedUntil, lastErr: "refused"},
		StateInitializing: {state: StateInitializing, until: blockedUntil, lastErr: "not ready"},
		StateRejected:     {state: StateRejected, lastErr: "unknown authority"},
	}
	type row struct {
		from State
		ev   hostEvent
		want hostHealth
	}
	rows := []row{
		// Any answer ends a block and clears the error, but never a rejection.
		{StateUsable, hostEvent{kind: hostAnswered}, hostHealth{state: StateUsable}},
		{StateUnreachable, hostEvent{kind: hostAnswered}, hostHealth{state: StateUsable}},
		{StateInitializing, hostEvent{kind: hostAnswered}, hostHealth{state: StateUsable}},
		{StateRejected, hostEvent{kind: hostAnswered}, hostHealth{state: StateRejected, lastErr: "unknown authority"}},
		// A network failure blocks for the block duration, from now.
		{StateUsable, hostEvent{kind: hostUnreachable, err: "reset"}, hostHealth{state: StateUnreachable, until: now.Add(block), lastErr: "reset"}},
		{StateUnreachable, hostEvent{kind: hostUnreachable, err: "reset"}, hostHealth{state: StateUnreachable, until: now.Add(block), lastErr: "reset"}},
		{StateInitializing, hostEvent{kind: hostUnreachable, err: "reset"}, hostHealth{state: StateUnreachable, until: now.Add(block), lastErr: "reset"}},
		{StateRejected, hostEvent{kind: hostUnreachable, err: "reset"}, hostHealth{state: StateRejected, lastErr: "reset"}},
		// A KEP-3028 refusal blocks for its Retry-After, at most the block.
		{StateUsable, hostEvent{kind: hostNotReady, wait: 2 * time.Second, err: "503"}, hostHealth{state: StateInitializing, until: now.Add(2 * time.Second), lastErr: "503"}},
		{StateUnreachable, hostEvent{kind: hostNotReady, wait: time.Minute, err: "503"}, hostHealth{state: StateInitializing, until: now.Add(block), lastErr: "503"}},
		{StateInitializing, hostEvent{kind: hostNotReady, err: "503"}, hostHealth{state: StateInitializing, until: now.Add(block), lastErr: "503"}},
		{StateRejected, hostEvent{kind: hostNotReady, wait: time.Second, err: "503"}, hostHealth{state: StateRejected, lastErr: "503"}},
		// A certificate that does not verify rejects the host for good.
		{StateUsable, hostEvent{kind: hostCertificateRejected, err: "x509"}, hostHealth{state: StateRejected, lastErr: "x509"}},
		{StateUnreachable, hostEvent{kind: hostCertificateRejected, err: "x509"}, hostHealth{state: StateRejected, lastErr: "x509"}},
		{StateInitializing, hostEvent{kind: hostCertificateRejected, err: "x509"}, hostHealth{state: StateRejected, lastErr: "x509"}},
		{StateRejected, hostEvent{kind: hostCertificateRejected}, hostHealth{state: StateRejected, lastErr: "unknown authority"}},
	}
	covered := map[State]map[hostEventKind]bool{}
	for _, r := range rows {
		if covered[r.from] == nil {
			covered[r.from] = map[hostEventKind]bool{}
		}
		covered[r.from][r.ev.kind] = true
		if got := transition(from[r.from], r.ev, now, block); got != r.want {
			t.Errorf("%s + %s: got %+v, want %+v", r.from, r.ev.kind, got, r.want)
		}
	}
	for _, s := range hostStates {
		for _, k := range hostEventKinds {
			if !covered[s][k] {
				t.Errorf("no row for state %s and event %s", s, k)
			}
		}
	}
}

func TestFailureKeepsTheLastErrorWhenItHasNone(t *testing.T) {
	now := time.Unix(1000, 0)
	got := transition(hostHealth{state: StateUnreachable, until: now, lastErr: "refused"}, hostEvent{kind: hostUnreachable}, now, time.Second)
	if got.lastErr != "refused" {
		t.Errorf("lastErr = %q, want the previous one", got.lastErr)
	}
}

func TestBlocksEndWithTime(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, s := range []State{StateUnreachable, StateInitializing} {
		h := hostHealth{state: s, until: now.Add(time.Second)}
		if got := h.stateAt(now); got != s {
			t.Errorf("%s before its end: %s", s, got)
		}
		if got := h.stateAt(now.Add(time.Second)); got != StateUsable {
			t.Errorf("%s at its end: %s, want Usable", s, got)
		}
	}
	if got := (hostHealth{state: StateRejected}).stateAt(now.Add(time.Hour)); got != StateRejected {
		t.Errorf("Rejected after an hour: %s", got)
	}
}

func TestEventFor(t *testing.T) {
	for _, tt := range []struct {
		f    Failure
		kind hostEventKind
		ok   bool
	}{
		{NetworkFailure, hostUnreachable, true},
		{NotReadyFailure, hostNotReady, true},
		{CertificateFailure, hostCertificateRejected, true},
		{NotHostFailure, 0, false},
	} {
		ev, ok := eventFor(tt.f, nil, time.Second)
		if ok != tt.ok || ok && ev.kind != tt.kind {
			t.Errorf("eventFor(%s) = %v, %v; want %v, %v", tt.f, ev.kind, ok, tt.kind, tt.ok)
		}
	}
}
