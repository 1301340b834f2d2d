package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/buildinfo"
)

// StateFile is where a data directory keeps its State.
const StateFile = "release.json"

// Binary is one installed steadyplane binary and its release.
type Binary struct {
	// Path is the installed copy (package binary: <data-dir>/bin/steadyplane-<hash>).
	Path string `json:"path"`
	// Release is what that binary's "version" says.
	Release string `json:"release"`
	// Digest is "sha256:<hex>" of the binary when a cluster's rollout
	// asked for it ("" when moved by hand or by upgrade on this server).
	Digest string `json:"digest,omitempty"`
}

// Phase is where a move to another binary stands.
type Phase string

// The phases of a move.
const (
	// Pending: asked for (steadyplane upgrade); the running up hands over
	// to it, or the next up starts it.
	Pending Phase = "Pending"
	// Starting: the target's up runs its first start (StartedBy).
	Starting Phase = "Starting"
	// Done: the target is Current.
	Done Phase = "Done"
	// Failed: the target did not come up; Current runs (Reason, Message).
	Failed Phase = "Failed"
)

// Reasons a move failed.
const (
	// ReasonExited: the target's up exited (or was killed) before it was up.
	ReasonExited = "Exited"
	// ReasonStartFailed: the target's up said why it could not start.
	ReasonStartFailed = "StartFailed"
	// ReasonUnsupported: this up cannot hand over (its control plane runs
	// as child processes).
	ReasonUnsupported = "Unsupported"
)

// State is a data directory's release: the binary up runs, the one before
// it, and a move under way. up reads it at every start (Start) and while it
// runs; steadyplane upgrade writes moves into it.
type State struct {
	Current  Binary  `json:"current"`
	Previous *Binary `json:"previous,omitempty"`
	// Target is the binary a move goes to (Pending, Starting, Failed).
	Target *Binary `json:"target,omitempty"`
	Phase  Phase   `json:"phase,omitempty"`
	// StartedBy is the process that runs the target's first start: the
	// up that handed over, whose pid an exec keeps.
	StartedBy Process `json:"startedBy,omitempty"`
	// Settling says the target's first start is up and settles (Settle)
	// before the move is done.
	Settling bool `json:"settling,omitempty"`
	// Reason and Message say why the last move failed.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Process names one process: its pid and its start time (clock ticks
// since boot), which a pid reused after a reboot does not share.
type Process struct {
	Pid   int    `json:"pid,omitempty"`
	Ticks uint64 `json:"ticks,omitempty"`
}

// ReadState reads dir's State; nil with no error when there is none.
func ReadState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, StateFile), err)
	}
	return &st, nil
}

// WriteState writes st into dir, atomically and readable by root alone.
func WriteState(dir string, st *State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, StateFile), append(b, '\n'), 0o600)
}

// Decision is what an up starting does about its data directory's release.
type Decision struct {
	// Run is the binary to run: this one, or another to exec.
	Run Binary
	// Write, when not nil, is the State to write before running.
	Write *State
	// Note is a progress line for the user ("" for none).
	Note string
}

// Start decides, at the start of up (binary self, process me), which
// binary runs the data directory:
//   - a Pending move starts its target, marked Starting by this process;
//   - the target's first start goes on; a Starting whose process is gone
//     (the attempt died, and a service manager started up again) failed:
//     the current binary runs and Failed says so;
//   - otherwise the current binary runs, unless this one is of the same
//     or a newer release: then it is a move by hand (the k3s way),
//     watched as an upgrade's is, so that a failure hands back. A binary
//     the directory moved away from (the previous one, a failed target)
//     does not take it back by being started: steadyplane upgrade does.
func Start(st *State, self Binary, me Process, exists func(string) bool, alive func(Process) bool) Decision {
	if st == nil {
		return Decision{Run: self, Write: &State{Current: self}}
	}
	switch st.Phase {
	case Pending:
		if st.Target != nil && exists(st.Target.Path) {
			return Decision{Run: *st.Target, Write: st.to(Starting, me, "", ""), Note: fmt.Sprintf("moving to release %s (%s)", st.Target.Release, st.Target.Path)}
		}
	case Starting:
		if st.Target != nil && st.StartedBy == me && self.Path == st.Target.Path {
			return Decision{Run: self}
		}
		if st.StartedBy != me && alive(st.StartedBy) {
			// Another up runs the attempt: the data directory's lock
			// refuses this one.
			return Decision{Run: self}
		}
		if st.Target != nil {
			what := "before it was up"
			if st.Settling {
				what = "while it settled"
			}
			next := st.to(Failed, Process{}, ReasonExited, fmt.Sprintf("up of release %s exited %s", st.Target.Release, what))
			run := st.Current
			if !exists(run.Path) {
				run = self
			}
			return Decision{Run: run, Write: next, Note: fmt.Sprintf("release %s failed (%s: %s); running %s", st.Target.Release, next.Reason, next.Message, run.Release)}
		}
	}
	if self.Path == st.Current.Path {
		return Decision{Run: self}
	}
	if !exists(st.Current.Path) {
		// Nothing to go back to: this binary is current.
		prev := st.Current
		next := st.to("", Process{}, st.Reason, st.Message)
		next.Current, next.Previous, next.Target = self, &prev, nil
		return Decision{Run: self, Write: next}
	}
	movedFrom := st.Previous != nil && self.Path == st.Previous.Path || st.Phase == Failed && st.Target != nil && self.Path == st.Target.Path
	if movedFrom || olderRelease(self.Release, st.Current.Release) {
		return Decision{Run: st.Current, Note: fmt.Sprintf("this data directory runs release %s (%s); starting it instead of %s (steadyplane upgrade moves it)", st.Current.Release, st.Current.Path, self.Release)}
	}
	next := st.to(Starting, me, "", "")
	next.Target = &self
	return Decision{Run: self, Write: next, Note: fmt.Sprintf("moving by hand from release %s to %s", st.Current.Release, self.Release)}
}

// to is st moved to phase, started by by (Starting) and failed for reason
// and message (Failed): a copy, whose settling, a part of the phase
// before, is over.
func (st State) to(phase Phase, by Process, reason, message string) *State {
	st.Phase, st.StartedBy, st.Reason, st.Message, st.Settling = phase, by, reason, message, false
	return &st
}

// Up is the State once the target's first start is up: the target is
// current, the binary before it previous. nil when st is no such start.
func Up(st *State, self Binary, me Process) *State {
	if !attempt(st, self, me) {
		return nil
	}
	prev := st.Current
	return &State{Current: self, Previous: &prev, Phase: Done}
}

// StartFailed is the State once the target's first start failed with err
// (a *CrashLoopError while it settled, or any error before it was up):
// the current binary runs again. nil when st is no such start.
func StartFailed(st *State, self Binary, me Process, err error) *State {
	if !attempt(st, self, me) {
		return nil
	}
	next := st.to(Failed, Process{}, ReasonStartFailed, err.Error())
	if crash := (*CrashLoopError)(nil); errors.As(err, &crash) {
		next.Reason = ReasonCrashLoop
	}
	return next
}

// Requeue is the State once this process (me), which marked the move
// Starting, was stopped (Ctrl-C, SIGTERM) before the target was up: no
// verdict, the move is asked for again. nil when me marked no move. The
// up that hands over and the target's up it becomes are the same process.
func Requeue(st *State, me Process) *State {
	if st == nil || st.Phase != Starting || st.StartedBy != me {
		return nil
	}
	return st.to(Pending, Process{}, st.Reason, st.Message)
}

// attempt says this up (self, me) runs the first start of st's move.
func attempt(st *State, self Binary, me Process) bool {
	return st != nil && st.Phase == Starting && st.Target != nil && st.StartedBy == me && st.Target.Path == self.Path
}

// olderRelease says a is an older release than b; releases that do not
// parse, and development builds, are not older (they do not block a move
// by hand).
func olderRelease(a, b string) bool {
	va, errA := buildinfo.ParseRelease(a)
	vb, errB := buildinfo.ParseRelease(b)
	return errA == nil && errB == nil && !isDev(va) && !isDev(vb) && va.LessThan(vb)
}
