package operator

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
)

// A release (spec.release) rolls as the seed's revisions do, with nodes
// for revisions: one node at a time, the servers first (each one's API
// server, etcd and controllers move together, and the API server's move
// is a revision its startup monitor watches), the next only once the one
// before is healthy on the new release, then the workers, whose node
// agents move in place. A node that cannot start the release goes back to
// the one it ran by itself and says so on its Node; the rollout stops there
// until the release changes.

// ReleaseNode is what the operator knows of a node for a release rollout.
type ReleaseNode struct {
	// Name is the Node's; Server says it runs a control plane.
	Name   string
	Server bool
	// Running, Target and Failed are its release annotations
	// (version@digest); Reason and Message say why Failed failed.
	Running, Target, Failed string
	Reason, Message         string
	// Healthy says the node is ready on what it runs: its Node Ready and,
	// on a server, every static pod Ready and its API server's revision
	// rolled out; Unhealthy says what is not.
	Healthy   bool
	Unhealthy string
}

// ReleaseDecision is what DecideRelease decided.
type ReleaseDecision struct {
	// Move is the node to ask to move now, "" for none.
	Move string
	// Waiting says what the rollout waits for ("" when nothing).
	Waiting string
	// Failed is the node the release failed on, nil when none did.
	Failed *ReleaseNode
	// Done says every node runs the release.
	Done bool
}

// OrderReleaseNodes sorts nodes as a release rolls over them: servers
// first, each group by name.
func OrderReleaseNodes(nodes []ReleaseNode) {
	slices.SortFunc(nodes, func(a, b ReleaseNode) int {
		if a.Server != b.Server {
			if a.Server {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

// DecideRelease is the next step of rolling want over nodes (in
// OrderReleaseNodes' order): stopped where it failed; waiting while a
// node moves or is not healthy on it yet; else the next node that does
// not run it. A worker moves only once every server runs the release
// healthy: node agents are never newer than the API servers.
//
// revisionsBusy, when not "", says an API server revision is rolling or
// due on some server (each server's move makes one, rolled over every
// server): no server moves meanwhile, so that at most one API server is
// ever down for either.
func DecideRelease(want v1alpha1.Release, nodes []ReleaseNode, revisionsBusy string) ReleaseDecision {
	w := want.String()
	for i := range nodes {
		if nodes[i].Failed == w && nodes[i].Running != w {
			return ReleaseDecision{Failed: &nodes[i]}
		}
	}
	for _, n := range nodes {
		if !n.Server && !n.Healthy {
			// A worker that is down holds no server and no other worker:
			// it moves when it is back.
			continue
		}
		switch {
		case n.Target != "" && n.Target != n.Running && n.Target != n.Failed:
			// A move under way, to this release or to one it replaced.
			return ReleaseDecision{Waiting: fmt.Sprintf("node %s is moving to %s", n.Name, releaseVersion(n.Target))}
		case n.Running == w && !n.Healthy:
			return ReleaseDecision{Waiting: fmt.Sprintf("node %s runs %s and is not healthy yet: %s", n.Name, want.Version, n.Unhealthy)}
		}
	}
	for _, n := range nodes {
		if n.Running == w || !n.Server {
			continue
		}
		// A server moves only when every server is healthy: the one moving
		// is the one down.
		for _, o := range nodes {
			if o.Server && !o.Healthy {
				return ReleaseDecision{Waiting: fmt.Sprintf("server %s is not healthy (%s); no server moves to %s meanwhile", o.Name, o.Unhealthy, want.Version)}
			}
		}
		if revisionsBusy != "" {
			return ReleaseDecision{Waiting: fmt.Sprintf("node %s moves to %s once %s", n.Name, want.Version, revisionsBusy)}
		}
		return ReleaseDecision{Move: n.Name}
	}
	for _, n := range nodes {
		if n.Running != w && n.Healthy {
			return ReleaseDecision{Move: n.Name}
		}
	}
	for _, n := range nodes {
		if n.Running != w {
			return ReleaseDecision{Waiting: fmt.Sprintf("node %s is not ready (%s); it moves to %s when it is", n.Name, n.Unhealthy, want.Version)}
		}
	}
	return ReleaseDecision{Done: true}
}

// ReleaseConditions are the release rollout's Progressing and Degraded.
func ReleaseConditions(want v1alpha1.Release, d ReleaseDecision, generation int64) []metav1.Condition {
	progressing := metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: "Rolling", ObservedGeneration: generation}
	degraded := metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: "AsExpected",
		Message: "no node failed to start " + want.Version, ObservedGeneration: generation}
	switch {
	case d.Done:
		progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionFalse, "RolledOut", "every node runs "+want.Version
	case d.Failed != nil:
		progressing.Status, progressing.Reason = metav1.ConditionFalse, "Stopped"
		progressing.Message = fmt.Sprintf("stopped at node %s, which went back; set another release to go on", d.Failed.Name)
		degraded.Status, degraded.Reason = metav1.ConditionTrue, cmp.Or(d.Failed.Reason, "ReleaseFailed")
		degraded.Message = fmt.Sprintf("node %s: release %s failed and the node went back to %s: %s", d.Failed.Name, want.Version,
			cmp.Or(releaseVersion(d.Failed.Running), "its previous release"), d.Failed.Message)
	case d.Move != "":
		progressing.Message = fmt.Sprintf("moving node %s to %s", d.Move, want.Version)
	default:
		progressing.Message = d.Waiting
	}
	return []metav1.Condition{progressing, degraded}
}

// ReleaseEvent is the Event for asking node to move, or for a failure
// first seen.
func releaseMoveEvent(want v1alpha1.Release, n ReleaseNode) Event {
	return Event{corev1.EventTypeNormal, "ReleaseMove", fmt.Sprintf("node %s: moving from %s to release %s", n.Name, cmp.Or(releaseVersion(n.Running), "an unknown release"), want.Version)}
}

// ReleaseNodeStatuses is the status's view of nodes rolling want, with
// when each was asked to move (the Move decided now, or as prev says) and
// when it was first seen healthy on it.
func ReleaseNodeStatuses(want v1alpha1.Release, nodes []ReleaseNode, prev []v1alpha1.NodeRelease, move string, now metav1.Time) []v1alpha1.NodeRelease {
	out := make([]v1alpha1.NodeRelease, 0, len(nodes))
	for _, n := range nodes {
		nr := v1alpha1.NodeRelease{NodeName: n.Name, Server: n.Server, Release: n.Running}
		if n.Target != "" && n.Target != n.Running {
			nr.Target = n.Target
		}
		if n.Failed != "" && n.Failed != n.Running {
			nr.Failed, nr.Reason, nr.Message = n.Failed, n.Reason, n.Message
		}
		if i := slices.IndexFunc(prev, func(p v1alpha1.NodeRelease) bool { return p.NodeName == n.Name }); i >= 0 {
			nr.Asked, nr.Moved = prev[i].Asked, prev[i].Moved
		}
		if n.Name == move {
			nr.Asked, nr.Moved = &now, nil
		}
		if nr.Asked != nil && nr.Moved == nil && n.Running == want.String() && n.Healthy {
			nr.Moved = &now
		}
		out = append(out, nr)
	}
	return out
}

// releaseVersion is the version of a version@digest.
func releaseVersion(release string) string { return v1alpha1.ReleaseOf(release).Version }
