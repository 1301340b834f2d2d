// Package fallback holds what the pieces of static-pod fallback share: the
// annotations a revisioned manifest carries, the reasons a startup monitor
// gives when it falls back to the last-known-good revision, and which of
// those reasons the operator retries.
//
// The pieces live in subpackages: revisions (the files of each revision on
// the node, the installer lock, the last-known-good link), monitor (the
// startup monitor's decision and its loop), pruner (which revisions may go),
// operator (revisions, node status, conditions and retries) and release (a
// server's move to another steadyplane release, and version skew).
package fallback

import "time"

// Annotations on the operand's static pod manifest, copied by the node agent
// onto the mirror pod, where the operator reads them.
const (
	// RevisionAnnotation names the revision a manifest belongs to.
	RevisionAnnotation = "steadyplane.io/revision"
	// FallbackForRevisionAnnotation is set on a last-known-good manifest put
	// back by the startup monitor: the revision that failed.
	FallbackForRevisionAnnotation = "startup-monitor.steadyplane.io/fallback-for-revision"
	// FallbackReasonAnnotation is the machine-readable Reason of the failure.
	FallbackReasonAnnotation = "startup-monitor.steadyplane.io/fallback-reason"
	// FallbackMessageAnnotation says, for a human, what failed.
	FallbackMessageAnnotation = "startup-monitor.steadyplane.io/fallback-message"
)

// Reason says why a revision was fallen back from.
type Reason string

// The reasons of the seed, in the order the startup monitor checks them.
const (
	// NeverStartedUp: the node agent never made a start attempt for the
	// revision's pod (its manifest does not parse, or is not a pod).
	NeverStartedUp Reason = "NeverStartedUp"
	// CrashLooping: the revision's container was started more than once
	// and is not healthy.
	CrashLooping Reason = "CrashLooping"
	// Unhealthy: it runs but /healthz is not OK within the timeout.
	Unhealthy Reason = "Unhealthy"
	// EtcdUnhealthy: /readyz is not OK within the timeout because of etcd.
	EtcdUnhealthy Reason = "EtcdUnhealthy"
	// NotReady: /readyz is not OK for another check (unfinished post-start
	// hooks), or the mirror pod does not show the revision Ready.
	NotReady Reason = "NotReady"
)

// Retried says whether the operator tries a revision that failed with reason
// again after a backoff. A manifest that never starts or a process that
// crashes will do the same next time; only a new spec helps. Unhealthy,
// etcd trouble and readiness may be the world around the revision, which
// recovers (and a certificate rotation must still roll out eventually).
func Retried(r Reason) bool {
	switch r {
	case NeverStartedUp, CrashLooping:
		return false
	}
	return true
}

// The reference's retry backoff: 10 minutes, doubling up to 6 hours.
const (
	DefaultRetryBase = 10 * time.Minute
	DefaultRetryMax  = 6 * time.Hour
)

// RetryDelay is how long the operator waits before the attempt-th retry
// (1-based) of a revision that failed with a retried reason: base, doubling
// with every failure, at most maxDelay.
func RetryDelay(attempt int, base, maxDelay time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}
