// Package monitor is the startup monitor of one revision of a static pod (the
// API server): it watches the revision start and either marks it
// last-known-good or falls back to the last-known-good revision with a
// reason. Decide is the whole decision, a pure function of what was observed;
// the loop around it reads files, the node agent's local status and the
// API server's health endpoints.
package monitor

import (
	"fmt"
	"strings"
	"time"

	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/healthz"
)

// Action is what the monitor does after one look.
type Action int

const (
	// Wait: look again later.
	Wait Action = iota
	// Ready: the revision is good; mark it last-known-good and leave.
	Ready
	// FallBack: put the last-known-good revision back, with the reason.
	FallBack
)

func (a Action) String() string {
	switch a {
	case Ready:
		return "Ready"
	case FallBack:
		return "FallBack"
	}
	return "Wait"
}

// Observation is one look at the revision the monitor watches.
type Observation struct {
	// OperandRevision is the revision the operand manifest in the manifest
	// directory belongs to; "" when it has none (or cannot be read).
	OperandRevision string
	// ManifestError is why the node agent cannot run the operand manifest
	// (it does not parse, or is not a valid pod); "" when it can.
	ManifestError string
	// Watched is how long the monitor has watched the current phase: its
	// own revision's manifest in place without a start attempt (bounded by
	// the first-start timeout), then from the first start attempt on
	// (bounded by the ready timeout; stopping the previous revision does
	// not count against the new one).
	Watched time.Duration
	// StartAttempts is how often the node agent tried to start the
	// revision's container, failed starts included (its local status).
	StartAttempts int
	// LivenessKills is how many of those runs the agent stopped itself
	// because the liveness probe failed (e.g. /livez failing for etcd):
	// restarts it caused, not crashes.
	LivenessKills int
	// Running is true while that container runs.
	Running bool
	// LastTermination describes the container's last end ("exit code 1:
	// <termination message>"), "" if it never ended.
	LastTermination string
	// Healthz and Readyz are the API server's answers; nil when it did not
	// answer at all.
	Healthz, Readyz *Probe
	// Mirror is the mirror pod as the API server shows it; nil when it was
	// not found (or the API server did not answer).
	Mirror *MirrorPod
}

// Probe is one answer of a health endpoint.
type Probe struct {
	// OK is a 200 answer.
	OK bool
	// Body is the verbose answer: one "[+]name ok" or "[-]name failed"
	// line per check.
	Body string
}

// MirrorPod is what the monitor needs of the mirror pod.
type MirrorPod struct {
	Revision string
	Ready    bool
}

// Timeouts bound how long the monitor waits.
type Timeouts struct {
	// FirstStart bounds the wait for the node agent's first start attempt
	// of a manifest it can run.
	FirstStart time.Duration
	// Ready bounds the wait for a started revision to become healthy and
	// ready (the seed's 5 minutes).
	Ready time.Duration
}

// DefaultTimeouts are the monitor's defaults: a first start is due within
// seconds of the manifest landing, a slow API server gets the seed's 5
// minutes to become ready.
var DefaultTimeouts = Timeouts{FirstStart: 30 * time.Second, Ready: 5 * time.Minute}

// Verdict is what Decide says.
type Verdict struct {
	Action Action
	// Reason and Message say why (for Wait: what is awaited).
	Reason  fallback.Reason
	Message string
}

// Decide is the monitor's decision for revision after one look, following
// the seed's order of checks. Unlike the reference, a manifest the agent
// cannot run and a crash loop are failures at once, not after the timeout:
// waiting would not change them. The timeout bounds only a revision that
// runs and has not become healthy and ready.
func Decide(revision string, o Observation, t Timeouts) Verdict {
	if o.OperandRevision != revision {
		// The installer has not put this revision in place yet, or another
		// one replaced it (a downgrade, a newer installer): not ours to judge.
		return Verdict{Action: Wait, Message: fmt.Sprintf("the operand manifest is revision %q, not %s", o.OperandRevision, revision)}
	}
	if o.ManifestError != "" {
		return Verdict{Action: FallBack, Reason: fallback.NeverStartedUp,
			Message: fmt.Sprintf("the node agent cannot run the manifest of revision %s: %s", revision, o.ManifestError)}
	}
	if o.StartAttempts == 0 {
		if o.Watched >= t.FirstStart {
			return Verdict{Action: FallBack, Reason: fallback.NeverStartedUp,
				Message: fmt.Sprintf("the node agent did not start revision %s within %v", revision, t.FirstStart)}
		}
		return Verdict{Action: Wait, Reason: fallback.NeverStartedUp, Message: "waiting for the first start attempt"}
	}
	healthy := o.Healthz != nil && o.Healthz.OK
	if o.StartAttempts-o.LivenessKills > 1 && !(o.Running && healthy) {
		msg := fmt.Sprintf("revision %s was started %d times", revision, o.StartAttempts)
		if o.LastTermination != "" {
			msg += "; last end: " + o.LastTermination
		}
		return Verdict{Action: FallBack, Reason: fallback.CrashLooping, Message: msg}
	}
	timedOut := o.Watched >= t.Ready
	waitOrFail := func(reason fallback.Reason, msg string) Verdict {
		if timedOut {
			return Verdict{Action: FallBack, Reason: reason, Message: fmt.Sprintf("%s after %v", msg, t.Ready)}
		}
		return Verdict{Action: Wait, Reason: reason, Message: msg}
	}
	if !healthy {
		if o.Healthz == nil {
			return waitOrFail(fallback.Unhealthy, "/healthz does not answer")
		}
		failed := failedChecks(o.Healthz.Body)
		// The API server's /healthz also fails while a post-start hook runs;
		// unfinished hooks alone are readiness (the issue: NotReady).
		reason := fallback.Unhealthy
		if onlyPostStartHooks(failed) {
			reason = fallback.NotReady
		}
		return waitOrFail(checkReason(failed, reason), "/healthz is not ok, unfinished: "+strings.Join(failed, ", "))
	}
	if o.Readyz == nil {
		return waitOrFail(fallback.NotReady, "/readyz does not answer")
	}
	if !o.Readyz.OK {
		failed := failedChecks(o.Readyz.Body)
		return waitOrFail(checkReason(failed, fallback.NotReady), "/readyz is not ok, unfinished: "+strings.Join(failed, ", "))
	}
	switch {
	case o.Mirror == nil:
		return waitOrFail(fallback.NotReady, "no mirror pod")
	case o.Mirror.Revision != revision:
		return waitOrFail(fallback.NotReady, fmt.Sprintf("the mirror pod shows revision %q", o.Mirror.Revision))
	case !o.Mirror.Ready:
		return waitOrFail(fallback.NotReady, "the mirror pod is not Ready")
	}
	return Verdict{Action: Ready, Message: fmt.Sprintf("revision %s is ready", revision)}
}

// failedChecks names the failed checks of a verbose answer, or says that
// it named none (a server that answers 500 without a list).
func failedChecks(verbose string) []string {
	if failed := healthz.FailedChecks(verbose); len(failed) > 0 {
		return failed
	}
	return []string{"(no check named)"}
}

// checkReason is EtcdUnhealthy when one of the failed checks is etcd's (the
// API server's "etcd" and "etcd-readiness" checks), else the given reason.
func checkReason(failed []string, otherwise fallback.Reason) fallback.Reason {
	for _, name := range failed {
		if name == "etcd" || strings.HasPrefix(name, "etcd-") {
			return fallback.EtcdUnhealthy
		}
	}
	return otherwise
}

// onlyPostStartHooks says whether every failed check is a post-start hook's.
func onlyPostStartHooks(failed []string) bool {
	for _, name := range failed {
		if !strings.HasPrefix(name, "poststarthook/") {
			return false
		}
	}
	return len(failed) > 0
}
