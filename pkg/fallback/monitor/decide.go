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
	// Leave: the fallback from this revision is in place already (the
	// monitor was restarted after writing it); only leave.
	Leave
)

func (a Action) String() string {
	switch a {
	case Ready:
		return "Ready"
	case FallBack:
		return "FallBack"
	case Leave:
		return "Leave"
	}
	return "Wait"
}

// Observation is one look at the revision the monitor watches.
type Observation struct {
	// OperandRevision is the revision the operand manifest in the manifest
	// directory belongs to; "" when it has none (or cannot be read).
	OperandRevision string
	// OperandFallbackFor is the operand manifest's fallback-for-revision
	// annotation: which revision it replaced after a failure ("" for none).
	OperandFallbackFor string
	// ManifestError is why the node agent cannot run the operand manifest
	// (it does not parse, or is not a valid pod); "" when it can.
	ManifestError string
	// Watched is how long the monitor has watched the current phase: its
	// own revision's manifest in place without a start attempt (bounded by
	// the first-start timeout), then from the first start attempt on
	// (bounded by the ready timeout; stopping the previous revision does
	// not count against the new one).
	Watched time.Duration
	// AgentDown is set when the node agent's local status could not be
	// read: nothing is known of the starts (the agent is restarting).
	AgentDown bool
	// StartAttempts is how often the node agent tried to start the
	// revision's container, failed starts included (its local status).
	StartAttempts int
	// StartRefused is why the node agent will not create the revision's
	// container at all (its CreateContainerConfigError message, e.g. a
	// mount it cannot make); "" when it has no such objection.
	StartRefused string
	// LivenessKills is how many of those runs the agent stopped itself
	// because the liveness probe failed (e.g. /livez failing for etcd):
	// restarts it caused, not crashes.
	LivenessKills int
	// Running is true while that container runs.
	Running bool
	// EtcdServers are the host:port of the operand's --etcd-servers: a
	// crash whose last words name one is etcd's, not the revision's.
	EtcdServers []string
	// LastTermination describes the container's last end ("exit code 1:
	// <termination message>"), "" if it never ended.
	LastTermination string
	// EtcdTLSRefused is why etcd refuses the TLS of the revision's own
	// etcd client settings (its --etcd-cafile, --etcd-certfile and
	// --etcd-keyfile), tried while the API server has not started
	// listening; "" when it accepts them, or nothing is known.
	EtcdTLSRefused string
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
	if v, ok := beforeItRan(revision, o, t); ok {
		return v
	}
	healthy := o.Healthz != nil && o.Healthz.OK
	if v, ok := fromItsEnds(revision, o, healthy); ok {
		return v
	}
	return fromItsHealth(revision, o, t, healthy)
}

// beforeItRan is the verdict while the revision is not the operand, or has
// not been started yet; ok is false once it has.
func beforeItRan(revision string, o Observation, t Timeouts) (v Verdict, ok bool) {
	if o.OperandRevision != revision && o.OperandFallbackFor == revision {
		return Verdict{Action: Leave, Message: fmt.Sprintf("revision %s has fallen back to revision %q already", revision, o.OperandRevision)}, true
	}
	if o.OperandRevision != revision {
		// The installer has not put this revision in place yet, or another
		// one replaced it (a downgrade, a newer installer): not ours to judge.
		return Verdict{Action: Wait, Message: fmt.Sprintf("the operand manifest is revision %q, not %s", o.OperandRevision, revision)}, true
	}
	if o.ManifestError != "" {
		return Verdict{Action: FallBack, Reason: fallback.NeverStartedUp,
			Message: fmt.Sprintf("the node agent cannot run the manifest of revision %s: %s", revision, o.ManifestError)}, true
	}
	if o.AgentDown {
		// Without the agent nothing starts, a fallback included; its
		// record of the starts is what the verdict needs once it is back.
		return Verdict{Action: Wait, Message: "the node agent does not answer"}, true
	}
	if o.StartAttempts == 0 {
		if o.StartRefused != "" {
			// The agent refuses the pod as written; retrying it changes nothing.
			return Verdict{Action: FallBack, Reason: fallback.NeverStartedUp,
				Message: fmt.Sprintf("the node agent will not create the container of revision %s: %s", revision, o.StartRefused)}, true
		}
		if o.Watched >= t.FirstStart {
			return Verdict{Action: FallBack, Reason: fallback.NeverStartedUp,
				Message: fmt.Sprintf("the node agent did not start revision %s within %v", revision, t.FirstStart)}, true
		}
		return Verdict{Action: Wait, Reason: fallback.NeverStartedUp, Message: "waiting for the first start attempt"}, true
	}
	return Verdict{}, false
}

// fromItsEnds is the verdict its exits give (etcd out of its reach, a
// crash loop); ok is false when they give none.
func fromItsEnds(revision string, o Observation, healthy bool) (v Verdict, ok bool) {
	if o.Running && o.Healthz == nil && o.EtcdTLSRefused != "" {
		// The API server waits up to its storage timeout for an etcd it
		// can never reach with these settings; the verdict is due now.
		return Verdict{Action: FallBack, Reason: fallback.EtcdUnhealthy,
			Message: fmt.Sprintf("revision %s cannot reach etcd with its etcd client settings: %s", revision, o.EtcdTLSRefused)}, true
	}
	if !o.Running && o.StartAttempts-o.LivenessKills >= 1 {
		if line := etcdFailure(o.LastTermination, o.EtcdServers); line != "" {
			// It exited because it could not reach etcd: the next start
			// would wait as long again, so the first exit decides.
			return Verdict{Action: FallBack, Reason: fallback.EtcdUnhealthy,
				Message: fmt.Sprintf("revision %s exited, etcd did not answer it: %s; last end: %s", revision, line, o.LastTermination)}, true
		}
	}
	if o.StartAttempts-o.LivenessKills > 1 && !(o.Running && healthy) {
		msg := fmt.Sprintf("revision %s was started %d times", revision, o.StartAttempts)
		reason := fallback.CrashLooping
		if line := etcdFailure(o.LastTermination, o.EtcdServers); line != "" {
			// The API server exits when it cannot reach etcd at its start:
			// the world around the revision, retried, not the revision.
			reason = fallback.EtcdUnhealthy
			msg += "; etcd did not answer it: " + line
		}
		if o.LastTermination != "" {
			msg += "; last end: " + o.LastTermination
		}
		return Verdict{Action: FallBack, Reason: reason, Message: msg}, true
	}
	return Verdict{}, false
}

// fromItsHealth is the verdict of a revision that runs: its /healthz,
// /readyz and mirror pod, with a fallback once t.Ready has passed.
func fromItsHealth(revision string, o Observation, t Timeouts, healthy bool) Verdict {
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

// etcdFailure is the line of a crashed API server's last words that shows
// it exited for etcd, "" when they do not: it gave up waiting (its exit
// error is a timeout, or names an etcd server) and a line naming one of the
// etcd servers reports a failure to reach it. Dials cancelled because the
// process was exiting for another reason (a bad flag, an audit policy) name
// the servers too, and do not count.
func etcdFailure(lastWords string, servers []string) string {
	lines := strings.Split(strings.TrimSpace(lastWords), "\n")
	exit := lines[len(lines)-1]
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "Error:") {
			exit = lines[i]
			break
		}
	}
	if !strings.Contains(exit, "deadline exceeded") && !namesAny(exit, servers) {
		return ""
	}
	for _, line := range lines {
		if namesAny(line, servers) && !strings.Contains(line, "operation was canceled") && !strings.Contains(line, "context canceled") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// namesAny tells whether text mentions one of the addresses.
func namesAny(text string, addresses []string) bool {
	for _, a := range addresses {
		if a != "" && strings.Contains(text, a) {
			return true
		}
	}
	return false
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
