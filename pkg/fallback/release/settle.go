package release

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// A move's first start that is up is not done yet: up waits until every
// component of its control plane was ready once, but a component that
// crashes a moment later, again and again, fails the release as surely
// as one that never started. So the move settles for SettleWindow: up
// watches its static pods through the node agent, and a component that
// restarts CrashLoopRestarts times hands the node back to the release it
// ran (Reason CrashLoop), as a start that failed does. One restart is not
// a crash loop: a controller that loses its lease exits once and is
// started again.

// SettleWindow is how long a move's first start watches its components
// once it is up before the move is done. The node agent restarts a
// container at once and then after 10 s, so a component that crashes as
// soon as it runs restarts twice within it.
const SettleWindow = 20 * time.Second

// CrashLoopRestarts is how many restarts of one component within the
// window fail the move.
const CrashLoopRestarts = 2

// ReasonCrashLoop: a component of the target's control plane restarted
// CrashLoopRestarts times while the move settled.
const ReasonCrashLoop = "CrashLoop"

// ComponentRun is one static pod of the node's control plane as its node
// agent reports it.
type ComponentRun struct {
	// Name is the pod's (the component and the node's name); UID tells a
	// pod made again (a new revision) from one restarted.
	Name, UID string
	// Restarts sums its containers' restart counts.
	Restarts int32
	// BackingOff says a container waits to be started again after
	// crashing more than once (the agent's CrashLoopBackOff).
	BackingOff bool
	// LastEnd says how a container last ended ("" when none did).
	LastEnd string
}

// CrashLoopError is a component crash-looping while a move settled.
type CrashLoopError struct {
	Component string
	Restarts  int32
	Window    time.Duration
	LastEnd   string
}

func (e *CrashLoopError) Error() string {
	s := fmt.Sprintf("%s restarted %d times within %v of being up", e.Component, e.Restarts, e.Window)
	if e.Restarts < CrashLoopRestarts {
		// It was backing off already when the window began.
		s = fmt.Sprintf("%s crash-loops (the node agent backs off from restarting it) within %v of being up", e.Component, e.Window)
	}
	if e.LastEnd != "" {
		s += "; it last ended with " + e.LastEnd
	}
	return s
}

// CrashLooping is the component of now that restarted CrashLoopRestarts
// times since base (a pod not in base, made since, counts from zero), or
// that backs off from crashing, nil when none.
func CrashLooping(base, now []ComponentRun, window time.Duration) *CrashLoopError {
	for _, c := range now {
		var before int32
		if i := slices.IndexFunc(base, func(b ComponentRun) bool { return b.UID == c.UID }); i >= 0 {
			before = base[i].Restarts
		}
		// A component backing off crash-looped already, maybe since
		// before the base was taken.
		if d := c.Restarts - before; d >= CrashLoopRestarts || c.BackingOff {
			return &CrashLoopError{Component: c.Name, Restarts: d, Window: window, LastEnd: c.LastEnd}
		}
	}
	return nil
}

// Settle watches a move's first start once it is up (see SettleWindow).
type Settle struct {
	// Window is how long it watches.
	Window time.Duration
	// Observe reads the control plane's static pods.
	Observe func(context.Context) ([]ComponentRun, error)
	// Now is the clock.
	Now func() time.Time

	began, answered time.Time
	base            []ComponentRun
}

// settleNoAnswer is how long, in windows, the node agent may not answer
// before the move is judged failed: a node whose agent does not answer
// cannot say its components run.
const settleNoAnswer = 3

// Step looks at the components once: done once the window passed with no
// crash loop, a *CrashLoopError when one crash-loops. A look that fails
// (the agent restarting) is taken again at the next step; the window does
// not end before one look after it succeeds, and an agent that answers no
// look for settleNoAnswer windows fails the move.
func (s *Settle) Step(ctx context.Context) (done bool, err error) {
	now := s.Now()
	if s.answered.IsZero() {
		s.answered = now
	}
	runs, oerr := s.Observe(ctx)
	if oerr != nil {
		if now.Sub(s.answered) >= settleNoAnswer*s.Window {
			return false, fmt.Errorf("the node agent did not answer for %v while the move settled: %w", now.Sub(s.answered), oerr)
		}
		return false, nil
	}
	s.answered = now
	if s.base == nil {
		s.began, s.base = now, runs
		if s.base == nil {
			s.base = []ComponentRun{}
		}
		return false, nil
	}
	if e := CrashLooping(s.base, runs, s.Window); e != nil {
		return false, e
	}
	return now.Sub(s.began) >= s.Window, nil
}

// FirstStart says this process runs the first start of a move in dir: it
// settles before the move is done (MarkSettling, then MarkUp).
func FirstStart(dir string) bool {
	me, err := Self()
	if err != nil {
		return false
	}
	st, err := ReadState(dir)
	return err == nil && attempt(st, me, Me())
}

// MarkSettling records that this process, a move's first start, is up and
// settles: the Node says so (the operator moves no other node meanwhile)
// and steadyplane upgrade prints it.
func MarkSettling(dir string, progress Progress) {
	me, err := Self()
	if err != nil {
		return
	}
	st, err := ReadState(dir)
	if err != nil || !attempt(st, me, Me()) {
		return
	}
	next := *st
	next.Settling = true
	if err := WriteState(dir, &next); err != nil {
		progress("release state: %v", err)
	}
}
