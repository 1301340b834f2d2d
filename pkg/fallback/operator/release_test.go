package operator

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
)

func TestDecideRelease(t *testing.T) {
	next := v1alpha1.Release{Version: "v0.2.0", Digest: "sha256:bb"}
	cur, nx := "v0.1.0@sha256:aa", next.String()
	server := func(name, running string) ReleaseNode {
		return ReleaseNode{Name: name, Server: true, Running: running, Healthy: true}
	}
	worker := func(name, running string) ReleaseNode {
		return ReleaseNode{Name: name, Running: running, Healthy: true}
	}
	with := func(n ReleaseNode, f func(*ReleaseNode)) ReleaseNode { f(&n); return n }
	for _, tc := range []struct {
		name    string
		nodes   []ReleaseNode
		move    string
		failed  string
		done    bool
		waiting bool
		busy    string
	}{
		{name: "no server moves while a revision rolls", nodes: []ReleaseNode{server("s1", nx), server("s2", cur)}, busy: "revision 4 rolls on s3", waiting: true},
		{name: "a worker does", nodes: []ReleaseNode{server("s1", nx), worker("w1", cur)}, busy: "revision 4 rolls on s1", move: "w1"},
		{name: "the first server first", nodes: []ReleaseNode{worker("w1", cur), server("s2", cur), server("s1", cur)}, move: "s1"},
		{name: "one at a time: a server moving holds the rest",
			nodes: []ReleaseNode{server("s1", nx), with(server("s2", cur), func(n *ReleaseNode) { n.Target = nx }), server("s3", cur)}, waiting: true},
		{name: "the next server once the one before is healthy on it", nodes: []ReleaseNode{server("s1", nx), server("s2", cur), server("s3", cur)}, move: "s2"},
		{name: "not before: its static pods or its revision are not ready",
			nodes: []ReleaseNode{with(server("s1", nx), func(n *ReleaseNode) { n.Healthy, n.Unhealthy = false, "etcd not Ready" }), server("s2", cur)}, waiting: true},
		{name: "workers after every server", nodes: []ReleaseNode{server("s1", nx), server("s2", nx), worker("w1", cur), worker("w2", cur)}, move: "w1"},
		{name: "a worker that is down does not hold the others",
			nodes: []ReleaseNode{server("s1", nx), with(worker("w1", cur), func(n *ReleaseNode) { n.Healthy = false }), worker("w2", cur)}, move: "w2"},
		{name: "but the rollout is not done without it",
			nodes: []ReleaseNode{server("s1", nx), with(worker("w1", cur), func(n *ReleaseNode) { n.Healthy = false })}, waiting: true},
		{name: "a server that is down holds the rollout",
			nodes: []ReleaseNode{with(server("s1", cur), func(n *ReleaseNode) { n.Healthy = false }), server("s2", cur)}, waiting: true},
		{name: "also when it is not the next to move",
			nodes: []ReleaseNode{server("s1", cur), server("s2", cur), with(server("s3", cur), func(n *ReleaseNode) { n.Healthy = false })}, waiting: true},
		{name: "a move to a release since replaced is waited for",
			nodes: []ReleaseNode{server("s1", cur), with(server("s2", cur), func(n *ReleaseNode) { n.Target = "v0.1.9@sha256:99" })}, waiting: true},
		{name: "a worker that went down while moving holds nothing",
			nodes: []ReleaseNode{server("s1", nx), with(worker("w1", cur), func(n *ReleaseNode) { n.Target, n.Healthy = nx, false }), worker("w2", cur)}, move: "w2"},
		{name: "a failure stops it where it failed",
			nodes: []ReleaseNode{with(server("s1", cur), func(n *ReleaseNode) { n.Target, n.Failed, n.Reason = nx, nx, "Exited" }), server("s2", cur)}, failed: "s1"},
		{name: "a fixed release rolls on from the failed node",
			nodes: []ReleaseNode{with(server("s1", cur), func(n *ReleaseNode) { n.Target, n.Failed = "v0.2.0@sha256:broken", "v0.2.0@sha256:broken" }), server("s2", cur)}, move: "s1"},
		{name: "a node that failed once and runs it now is not a failure", nodes: []ReleaseNode{with(server("s1", nx), func(n *ReleaseNode) { n.Failed = nx })}, done: true},
		{name: "done", nodes: []ReleaseNode{server("s1", nx), worker("w1", nx)}, done: true},
		{name: "a node that reports no release yet is moved", nodes: []ReleaseNode{server("s1", nx), server("s2", "")}, move: "s2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := append([]ReleaseNode(nil), tc.nodes...)
			OrderReleaseNodes(nodes)
			d := DecideRelease(next, nodes, tc.busy)
			failed := ""
			if d.Failed != nil {
				failed = d.Failed.Name
			}
			if d.Move != tc.move || failed != tc.failed || d.Done != tc.done || (d.Waiting != "") != tc.waiting {
				t.Fatalf("DecideRelease = %+v (failed %q), want move %q, failed %q, done %v, waiting %v", d, failed, tc.move, tc.failed, tc.done, tc.waiting)
			}
			cs := ReleaseConditions(next, d, 3)
			wantProgressing := metav1.ConditionTrue
			if tc.done || tc.failed != "" {
				wantProgressing = metav1.ConditionFalse
			}
			wantDegraded := metav1.ConditionFalse
			if tc.failed != "" {
				wantDegraded = metav1.ConditionTrue
			}
			if cs[0].Status != wantProgressing || cs[1].Status != wantDegraded || cs[0].Message == "" || cs[1].Message == "" {
				t.Fatalf("conditions %+v, want Progressing %s and Degraded %s, with messages", cs, wantProgressing, wantDegraded)
			}
		})
	}
}

func TestReleaseNodeStatuses(t *testing.T) {
	want := v1alpha1.Release{Version: "v2", Digest: "d2"}
	t0, t1 := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(160, 0))
	prev := []v1alpha1.NodeRelease{{NodeName: "s1", Asked: &t0}, {NodeName: "s2"}}
	got := ReleaseNodeStatuses(want, []ReleaseNode{
		{Name: "s1", Server: true, Running: "v2@d2", Target: "v2@d2", Failed: "v2@d2", Healthy: true},
		{Name: "s2", Server: true, Running: "v1@d1", Target: "v2@d2", Failed: "v2@d0", Reason: "Exited", Message: "exit 1"},
	}, prev, "s2", t1)
	if got[0].Asked == nil || !got[0].Asked.Equal(&t0) || got[0].Moved == nil || !got[0].Moved.Equal(&t1) {
		t.Errorf("a node asked at %v and healthy on the release now: asked %v, moved %v", t0, got[0].Asked, got[0].Moved)
	}
	if got[1].Asked == nil || !got[1].Asked.Equal(&t1) || got[1].Moved != nil {
		t.Errorf("a node asked now: asked %v, moved %v", got[1].Asked, got[1].Moved)
	}
	if got[0].Target != "" || got[0].Failed != "" {
		t.Errorf("a node on its target shows neither a target nor a failure of it: %+v", got[0])
	}
	if got[1].Target != "v2@d2" || got[1].Failed != "v2@d0" || got[1].Reason != "Exited" {
		t.Errorf("a node moving shows its target and its last failure: %+v", got[1])
	}
}

// TestSyncRelease runs Sync with a release to roll: the Node asked, the
// status, the conditions and the Events.
func TestSyncRelease(t *testing.T) {
	want := v1alpha1.Release{Version: "v0.2.0", Digest: "sha256:" + strings.Repeat("b", 64)}
	old := "v0.1.0@sha256:" + strings.Repeat("a", 64)
	node := func(name, running, failed string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{v1alpha1.ReleaseRunningAnnotation: running}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		if failed != "" {
			n.Annotations[v1alpha1.ReleaseFailedAnnotation] = failed
			n.Annotations[v1alpha1.ReleaseFailedReasonAnnotation] = "Exited"
			n.Annotations[v1alpha1.ReleaseFailedMessageAnnotation] = "up of release v0.2.0 exited before it was up"
		}
		return n
	}
	settling := func(n *corev1.Node) *corev1.Node {
		n.Annotations[v1alpha1.ReleaseSettlingAnnotation] = n.Annotations[v1alpha1.ReleaseRunningAnnotation]
		return n
	}
	for _, tc := range []struct {
		name                  string
		server, worker        *corev1.Node
		asked                 string // the node given the target
		progressing, degraded metav1.ConditionStatus
		event                 string
		says                  string // in Progressing's message, when not ""
	}{
		{"the server first", node("n", old, ""), node("w", old, ""), "n", metav1.ConditionTrue, metav1.ConditionFalse, "ReleaseMove", ""},
		{"then the worker", node("n", want.String(), ""), node("w", old, ""), "w", metav1.ConditionTrue, metav1.ConditionFalse, "ReleaseMove", ""},
		{"not while the server settles", settling(node("n", want.String(), "")), node("w", old, ""), "", metav1.ConditionTrue, metav1.ConditionFalse, "", "settling on v0.2.0"},
		{"stopped where it failed", node("n", old, want.String()), node("w", old, ""), "", metav1.ConditionFalse, metav1.ConditionTrue, "ReleaseFailed", ""},
		{"rolled out", node("n", want.String(), ""), node("w", want.String(), ""), "", metav1.ConditionFalse, metav1.ConditionFalse, "ReleaseRolledOut", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &v1alpha1.KubeAPIServer{Spec: v1alpha1.KubeAPIServerSpec{Release: &want},
				Status: v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 1, NodeStatuses: []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 1}}}}
			objs := append(existingRevision(t, 1, nil), mirrorPod("n", 1, 0, true), tc.server, tc.worker)
			f := newSyncFixture(t, time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC), obj, objs...)
			next, evs, st := f.sync(t)
			for _, name := range []string{"n", "w"} {
				n, err := f.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				asked := n.Annotations[v1alpha1.ReleaseTargetAnnotation] == want.String()
				if asked != (name == tc.asked) {
					t.Errorf("node %s asked to move: %v, want only %q asked", name, asked, tc.asked)
				}
			}
			if st.Release == nil || st.Release.Release != want || len(st.Release.Nodes) != 2 || !st.Release.Nodes[0].Server || st.Release.Nodes[1].Server {
				t.Fatalf("status.release = %+v; want the release, the server n then the worker w", st.Release)
			}
			p := meta.FindStatusCondition(st.Release.Conditions, v1alpha1.ConditionProgressing)
			d := meta.FindStatusCondition(st.Release.Conditions, v1alpha1.ConditionDegraded)
			if p == nil || d == nil || p.Status != tc.progressing || d.Status != tc.degraded {
				t.Errorf("conditions %+v; want Progressing %s, Degraded %s", st.Release.Conditions, tc.progressing, tc.degraded)
			}
			if tc.degraded == metav1.ConditionTrue && (!strings.Contains(d.Message, "node n") || d.Reason != "Exited") {
				t.Errorf("Degraded %+v does not name the node and its reason", d)
			}
			if tc.says != "" && !strings.Contains(p.Message, tc.says) {
				t.Errorf("Progressing says %q; want %q in it", p.Message, tc.says)
			}
			if tc.event == "" && len(evs) > 0 {
				t.Errorf("events %v, want none", evs)
			}
			if tc.event != "" && !slices.ContainsFunc(evs, func(e string) bool { return strings.Contains(e, tc.event) }) {
				t.Errorf("events %v, want %s", evs, tc.event)
			}
			if rolling := tc.progressing == metav1.ConditionTrue; rolling != (next > 0 && next <= inFlightPoll) {
				t.Errorf("requeue in %v while rolling is %v", next, rolling)
			}
		})
	}
}

func TestMovingNode(t *testing.T) {
	node := func(name, target, running, failed string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			v1alpha1.ReleaseTargetAnnotation: target, v1alpha1.ReleaseRunningAnnotation: running, v1alpha1.ReleaseFailedAnnotation: failed}}}
	}
	for _, tc := range []struct {
		nodes []corev1.Node
		want  string
	}{
		{[]corev1.Node{node("s1", "", "v1@a", "")}, ""},
		{[]corev1.Node{node("s1", "v2@b", "v2@b", ""), node("s2", "v2@b", "v1@a", "")}, "s2"},
		{[]corev1.Node{node("s1", "v2@b", "v1@a", "v2@b")}, ""},
	} {
		if got := MovingNode(tc.nodes); got != tc.want {
			t.Errorf("MovingNode = %q, want %q", got, tc.want)
		}
	}
}
