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

// StaleTemplates are the nodes (sorted) whose templates hash now differs
// from the hash in rendered, the templates the latest revision was rendered
// from on each node. A node with no rendering of the latest revision yet is
// not stale: it is rendered from its templates as they are when it is
// installed. A node whose templates are gone is not either: nothing can be
// rendered for it.
func StaleTemplates(now, rendered map[string]string) []string {
	var stale []string
	for node, h := range rendered {
		if cur, ok := now[node]; ok && cur != h {
			stale = append(stale, node)
		}
	}
	slices.Sort(stale)
	return stale
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

// NewestRunning is the newest revision a node runs (0 for none): what a
// joining server starts with.
func NewestRunning(st v1alpha1.KubeAPIServerStatus) int32 { return latestGood(st) }

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

// AllAt tells whether every node named runs revision n with nothing in
// flight: a rollout over them is over.
func AllAt(st v1alpha1.KubeAPIServerStatus, names []string, n int32) bool {
	for _, name := range names {
		i := slices.IndexFunc(st.NodeStatuses, func(ns v1alpha1.NodeStatus) bool { return ns.NodeName == name })
		if i < 0 || st.NodeStatuses[i].CurrentRevision != n || st.NodeStatuses[i].TargetRevision != 0 {
			return false
		}
	}
	return true
}

// Summary says in one line where each node is, for a log or a waiting test.
func Summary(st v1alpha1.KubeAPIServerStatus) string {
	var s []string
	for _, ns := range st.NodeStatuses {
		s = append(s, fmt.Sprintf("%s at %d (target %d, failed %d %s)", ns.NodeName, ns.CurrentRevision, ns.TargetRevision, ns.LastFailedRevision, ns.LastFailedReason))
	}
	return fmt.Sprintf("latest %d: %s", st.LatestAvailableRevision, strings.Join(s, "; "))
}

// WithoutNodes is nodes without the statuses of the nodes named in removed.
func WithoutNodes(nodes []v1alpha1.NodeStatus, removed []string) []v1alpha1.NodeStatus {
	return slices.DeleteFunc(slices.Clone(nodes), func(ns v1alpha1.NodeStatus) bool { return slices.Contains(removed, ns.NodeName) })
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

// CauseKind is why the operator makes a new revision.
type CauseKind int

// The causes of a new revision. CauseNone is the zero value: a decision
// for no revision carries it.
const (
	CauseNone CauseKind = iota
	// CauseFirst: no revision in the API yet.
	CauseFirst
	// CauseInputsChanged: the hash of the spec or the ConfigMaps and
	// Secrets it names differs from the latest revision's.
	CauseInputsChanged
	// CauseTemplatesChanged: a node's templates differ from those the
	// latest revision was rendered from on it ("up" restarted with another
	// binary or other settings); the new revision has the same inputs.
	CauseTemplatesChanged
	// CauseRetry: the latest revision fell back for a retried reason and
	// its backoff is over; the new revision has the same inputs.
	CauseRetry
)

// Cause is why a new revision is made. Its String is the text of the
// revision's cause annotation and of its Event, which users and tests read.
type Cause struct {
	Kind CauseKind
	// Revision, Reason and Fallbacks are, for CauseRetry, the failed
	// revision, the startup monitor's reason and the fallback count: the
	// text names them so that a retry can be told from a new spec.
	Revision  int32
	Reason    string
	Fallbacks int32
	// Nodes are, for CauseTemplatesChanged, the nodes whose templates
	// changed.
	Nodes []string
}

// String is the cause's text ("" for CauseNone).
func (c Cause) String() string {
	switch c.Kind {
	case CauseFirst:
		return "first revision"
	case CauseInputsChanged:
		return "the spec or its ConfigMaps and Secrets changed"
	case CauseTemplatesChanged:
		return "the templates of " + strings.Join(c.Nodes, ", ") + " changed"
	case CauseRetry:
		return fmt.Sprintf("retry of revision %d, which failed with %s (fallback %d)", c.Revision, c.Reason, c.Fallbacks)
	}
	return ""
}

// EventReason is the reason of the Event announcing the revision, and the
// reason label of the revisions metric: retries are counted apart from
// revisions the user asked for.
func (c Cause) EventReason() string {
	switch c.Kind {
	case CauseNone:
		return ""
	case CauseRetry:
		return "RevisionRetry"
	}
	return "RevisionCreated"
}

// RevisionState is what NextRevision decides on, as Sync observed it.
type RevisionState struct {
	// Latest is the newest revision in the API (0 for none), LatestHash its
	// input hash.
	Latest     int32
	LatestHash string
	// InputHash is the hash of the inputs now. InputErr names what is
	// missing from them: incomplete inputs make no revision, not even a
	// retry, until they are whole.
	InputHash string
	InputErr  error
	// Nodes are the node statuses, with the fallbacks seen in this sync.
	Nodes []v1alpha1.NodeStatus
	// StaleTemplates are the nodes whose templates changed since the
	// latest revision was rendered for them (StaleTemplates).
	StaleTemplates []string
}

// RevisionDecision is what NextRevision decides.
type RevisionDecision struct {
	// Cause is why revision Revision (Latest+1) is made; with CauseNone,
	// Revision is 0 and none is made.
	Cause    Cause
	Revision int32
	// RetryIn is how long until a retry of the failed latest revision is
	// due, when it is not yet (0 otherwise): nothing else may wake Sync then.
	RetryIn time.Duration
}

// New tells whether a new revision is made.
func (d RevisionDecision) New() bool { return d.Cause.Kind != CauseNone }

// NextRevision decides whether a new revision is made, and why: when the
// inputs changed, when a node's templates changed, or when the latest
// revision failed for a retried reason and its backoff is over at now. A
// change of the inputs wins over the others: it is a revision with the new
// inputs, which the user asked for. Changed templates win over a retry: the
// change may be the repair.
func NextRevision(s RevisionState, p RetryPolicy, now time.Time) RevisionDecision {
	if s.InputErr != nil {
		return RevisionDecision{}
	}
	newRevision := func(c Cause) RevisionDecision { return RevisionDecision{Cause: c, Revision: s.Latest + 1} }
	if s.InputHash != s.LatestHash {
		if s.Latest == 0 {
			return newRevision(Cause{Kind: CauseFirst})
		}
		return newRevision(Cause{Kind: CauseInputsChanged})
	}
	if len(s.StaleTemplates) > 0 {
		return newRevision(Cause{Kind: CauseTemplatesChanged, Nodes: s.StaleTemplates})
	}
	ns, failed := Failed(s.Nodes, s.Latest)
	if !failed {
		return RevisionDecision{}
	}
	at, retried := p.RetryAt(ns)
	if !retried {
		return RevisionDecision{}
	}
	if wait := at.Sub(now); wait > 0 {
		return RevisionDecision{RetryIn: wait}
	}
	return newRevision(Cause{Kind: CauseRetry, Revision: s.Latest, Reason: ns.LastFailedReason, Fallbacks: ns.LastFallbackCount})
}

// conditions are the status's conditions (Conditions), with Degraded set by
// incomplete inputs: no revision is made until they are whole, and that
// outranks a fallback the user may already have seen.
func conditions(st v1alpha1.KubeAPIServerStatus, p RetryPolicy, generation int64, inputErr error) []metav1.Condition {
	cs := Conditions(st, p, generation)
	for i, c := range cs {
		if c.Type == v1alpha1.ConditionDegraded && inputErr != nil {
			cs[i].Status, cs[i].Reason, cs[i].Message = metav1.ConditionTrue, "InvalidInput", inputErr.Error()
		}
	}
	return cs
}

// requeueAfter is when Sync looks again without an event: when a retry is
// due, and, while a rollout is in flight, within inFlightPoll.
func requeueAfter(retryIn time.Duration, nodes []v1alpha1.NodeStatus) time.Duration {
	if inFlight(nodes) && (retryIn == 0 || retryIn > inFlightPoll) {
		return inFlightPoll
	}
	return retryIn
}

// inFlightPoll is how often a rollout in flight is looked at without an
// event (the informers' events lag after an API server restart).
const inFlightPoll = 2 * time.Second

// inFlight tells whether a node is installing or starting a revision.
func inFlight(nodes []v1alpha1.NodeStatus) bool {
	return slices.ContainsFunc(nodes, func(ns v1alpha1.NodeStatus) bool { return ns.TargetRevision != 0 })
}
