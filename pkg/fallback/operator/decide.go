package operator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/pruner"
)

// Mirror is what a node's operand mirror pod shows.
type Mirror struct {
	// Revision is its revision annotation (0 for none).
	Revision int32
	// FallbackFor, Reason and Message are the startup monitor's
	// annotations on a fallback manifest (FallbackFor 0 for none).
	FallbackFor     int32
	Reason, Message string
	// Ready is its Ready condition.
	Ready bool
	// Created is when the mirror pod was created.
	Created time.Time
}

// Event is an Event the operator records on the KubeAPIServer.
type Event struct {
	Type, Reason, Message string
}

// ObserveNode brings a node's status up to date with its mirror pod (nil
// when there is none): a fallback the startup monitor made is recorded once
// (a newer failed revision than the last recorded), a target revision
// running Ready is rolled out, and with nothing in flight the current
// revision follows what runs.
//
// installed is when the installer of the target revision finished (zero
// while it runs or is unknown): a mirror pod of another revision, without a
// fallback for the target, created after that means the target's manifest
// was replaced by someone else ("up" restarting on last-known-good), and
// the rollout is over without a verdict.
func ObserveNode(ns v1alpha1.NodeStatus, m *Mirror, installed time.Time, now metav1.Time) (v1alpha1.NodeStatus, []Event) {
	if m == nil {
		return ns, nil
	}
	switch {
	case ns.TargetRevision != 0 && m.Revision != ns.TargetRevision && m.FallbackFor < ns.TargetRevision &&
		!installed.IsZero() && m.Created.After(installed):
		target := ns.TargetRevision
		ns.TargetRevision = 0
		if m.Ready {
			ns.CurrentRevision = m.Revision
		}
		return ns, []Event{{corev1.EventTypeWarning, "RolloutInterrupted", fmt.Sprintf(
			"node %s: revision %d was installed but the node runs revision %d without a verdict on it (restarted); installing again", ns.NodeName, target, m.Revision)}}
	case m.FallbackFor > ns.LastFailedRevision:
		ns.LastFailedRevision = m.FallbackFor
		ns.LastFailedReason = m.Reason
		ns.LastFailedTime = &now
		ns.LastFallbackCount++
		ns.LastFailedRevisionErrors = []string{m.Message}
		ns.CurrentRevision = m.Revision
		if ns.TargetRevision <= m.FallbackFor {
			ns.TargetRevision = 0
		}
		return ns, []Event{{corev1.EventTypeWarning, "RevisionFallback", fmt.Sprintf(
			"node %s: revision %d failed (%s) and the node fell back to revision %d: %s", ns.NodeName, m.FallbackFor, m.Reason, m.Revision, m.Message)}}
	case ns.TargetRevision != 0 && m.Revision == ns.TargetRevision && m.FallbackFor == 0 && m.Ready:
		ns.CurrentRevision, ns.TargetRevision = m.Revision, 0
		ns.LastFallbackCount = 0
		return ns, []Event{{corev1.EventTypeNormal, "RevisionRolledOut", fmt.Sprintf("node %s: revision %d is ready", ns.NodeName, m.Revision)}}
	case ns.TargetRevision == 0 && m.Ready && m.Revision != 0:
		ns.CurrentRevision = m.Revision
	}
	return ns, nil
}

// NextInstall is the node to install revision latest on next, if any: one
// node at a time, none once latest has failed on a node (a rollout stops at
// a failed node). A node still installing or starting an older revision
// gets latest at once: the newer spec supersedes it (the installer lock
// orders the writes, and the older revision's startup monitor is replaced
// with the newer one's).
func NextInstall(nodes []v1alpha1.NodeStatus, latest int32) (string, bool) {
	for _, ns := range nodes {
		if ns.LastFailedRevision >= latest {
			return "", false
		}
	}
	for _, ns := range nodes {
		if ns.TargetRevision != 0 {
			if ns.TargetRevision < latest {
				return ns.NodeName, true
			}
			return "", false
		}
	}
	for _, ns := range nodes {
		if ns.CurrentRevision < latest {
			return ns.NodeName, true
		}
	}
	return "", false
}

// Failed returns the node on which latest failed, if one did.
func Failed(nodes []v1alpha1.NodeStatus, latest int32) (v1alpha1.NodeStatus, bool) {
	for _, ns := range nodes {
		if latest > 0 && ns.LastFailedRevision == latest {
			return ns, true
		}
	}
	return v1alpha1.NodeStatus{}, false
}

// RetryPolicy is the backoff between retries of a failed revision.
type RetryPolicy struct {
	Base, Max time.Duration
}

// RetryAt says when the latest revision, failed on ns, is retried (as a new
// revision with the same inputs); ok is false when its reason is not
// retried: a manifest that never starts or a crash loop waits for a new spec.
func (p RetryPolicy) RetryAt(ns v1alpha1.NodeStatus) (at time.Time, ok bool) {
	if !fallback.Retried(fallback.Reason(ns.LastFailedReason)) || ns.LastFailedTime == nil {
		return time.Time{}, false
	}
	return ns.LastFailedTime.Add(fallback.RetryDelay(int(max(ns.LastFallbackCount, 1)), p.Base, p.Max)), true
}

// Conditions are the status's Available, Progressing and Degraded
// conditions (their transition times are set by meta.SetStatusCondition).
func Conditions(st v1alpha1.KubeAPIServerStatus, p RetryPolicy, generation int64) []metav1.Condition {
	var running, progressing, degraded []string
	var reason fallback.Reason
	for _, ns := range st.NodeStatuses {
		if ns.CurrentRevision > 0 {
			running = append(running, fmt.Sprintf("%s at revision %d", ns.NodeName, ns.CurrentRevision))
		}
		if ns.TargetRevision != 0 {
			progressing = append(progressing, fmt.Sprintf("%s: revision %d to %d", ns.NodeName, ns.CurrentRevision, ns.TargetRevision))
		}
		if ns.LastFailedRevision > ns.CurrentRevision && ns.LastFailedRevision >= latestGood(st) {
			reason = fallback.Reason(ns.LastFailedReason)
			msg := fmt.Sprintf("node %s: revision %d fell back to revision %d (%s): %s", ns.NodeName, ns.LastFailedRevision, ns.CurrentRevision,
				ns.LastFailedReason, strings.Join(ns.LastFailedRevisionErrors, "; "))
			if at, ok := p.RetryAt(ns); ok && ns.LastFailedRevision == st.LatestAvailableRevision {
				msg += fmt.Sprintf(". Retrying as a new revision at %s (fallback %d)", at.UTC().Format(time.RFC3339), ns.LastFallbackCount)
			} else if !ok {
				msg += ". Not retried: change the spec to roll out a new revision"
			}
			degraded = append(degraded, msg)
		}
	}
	cond := func(t string, ok bool, trueReason, falseReason string, msgs []string, otherwise string) metav1.Condition {
		c := metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: falseReason, Message: otherwise, ObservedGeneration: generation}
		if ok {
			c.Status, c.Reason, c.Message = metav1.ConditionTrue, trueReason, strings.Join(msgs, "; ")
		}
		return c
	}
	latest := fmt.Sprintf("revision %d", st.LatestAvailableRevision)
	return []metav1.Condition{
		cond(v1alpha1.ConditionAvailable, len(running) > 0, "AsExpected", "NoRevisionRunning", running, "no node runs a revision"),
		cond(v1alpha1.ConditionProgressing, len(progressing) > 0, "RollingOut", "AsExpected", progressing, "no rollout in progress; latest is "+latest),
		cond(v1alpha1.ConditionDegraded, len(degraded) > 0, string(reason), "AsExpected", degraded, "no node fell back from "+latest),
	}
}

// latestGood is the newest revision a node runs: a failure older than it
// is history, not degradation.
func latestGood(st v1alpha1.KubeAPIServerStatus) int32 {
	var n int32
	for _, ns := range st.NodeStatuses {
		n = max(n, ns.CurrentRevision)
	}
	return n
}

// SortNodes orders node statuses by name, adding one for each node in
// names that has none (a node whose API server mirror pod appeared).
func SortNodes(nodes []v1alpha1.NodeStatus, names []string) []v1alpha1.NodeStatus {
	out := slices.Clone(nodes)
	for _, n := range names {
		if !slices.ContainsFunc(out, func(ns v1alpha1.NodeStatus) bool { return ns.NodeName == n }) {
			out = append(out, v1alpha1.NodeStatus{NodeName: n})
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.NodeStatus) int { return strings.Compare(a.NodeName, b.NodeName) })
	return out
}

// Prunable are the revisions (of all, in the API) that may be deleted with
// their copies: beyond the newest keep, and protected on no node — not its
// current, target or last failed revision, nor the latest (protected even
// before any node has a status). Ascending.
func Prunable(all []int, keep int, st v1alpha1.KubeAPIServerStatus) []int {
	_, prunable := pruner.Split(all, keep, pruner.Protected{Target: int(st.LatestAvailableRevision)})
	for _, ns := range st.NodeStatuses {
		_, pruned := pruner.Split(all, keep, pruner.Protected{Current: int(ns.CurrentRevision), Target: int(max(ns.TargetRevision, st.LatestAvailableRevision)), LastFailed: int(ns.LastFailedRevision)})
		prunable = slices.DeleteFunc(prunable, func(n int) bool { return !slices.Contains(pruned, n) })
	}
	return prunable
}
