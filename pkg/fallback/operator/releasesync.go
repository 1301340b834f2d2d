package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	nodeutil "k8s.io/component-helpers/node/util"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// syncRelease rolls spec.release (DecideRelease) and writes its status
// into st. It reads the Nodes and the static pods live: a rollout restarts
// API servers, and the informers' watches come back late. It says whether
// the rollout is in flight (Sync then looks again soon).
func (o *Operator) syncRelease(ctx context.Context, obj *v1alpha1.KubeAPIServer, st *v1alpha1.KubeAPIServerStatus, event func(Event)) (bool, error) {
	want := obj.Spec.Release
	if want == nil {
		st.Release = nil
		return false, nil
	}
	nodes, err := o.releaseNodes(ctx, st)
	if err != nil {
		return false, err
	}
	OrderReleaseNodes(nodes)
	d := DecideRelease(*want, nodes, revisionsBusy(st))

	rs := &v1alpha1.ReleaseStatus{Release: *want}
	prev := st.Release
	if prev != nil && prev.Release == *want {
		rs.StartTime, rs.CompletionTime, rs.Conditions = prev.StartTime, prev.CompletionTime, prev.Conditions
	}
	now := metav1.NewTime(o.Clock.Now())
	if d.Move != "" {
		i := slices.IndexFunc(nodes, func(n ReleaseNode) bool { return n.Name == d.Move })
		if err := o.setReleaseTarget(ctx, d.Move, want.String()); err != nil {
			return true, fmt.Errorf("asking node %s to move to release %s: %w", d.Move, want.Version, err)
		}
		event(releaseMoveEvent(*want, nodes[i]))
		nodes[i].Target = want.String()
		if rs.StartTime == nil {
			rs.StartTime = &now
		}
	}
	if d.Failed != nil && !failureSeen(prev, *d.Failed) {
		event(Event{corev1.EventTypeWarning, "ReleaseFailed", fmt.Sprintf("node %s: release %s failed (%s) and the node went back to %s: %s; the rollout stops here",
			d.Failed.Name, want.Version, d.Failed.Reason, releaseVersion(d.Failed.Running), d.Failed.Message)})
		o.Metrics.releaseFallback(d.Failed.Reason)
	}
	if d.Done && rs.CompletionTime == nil {
		rs.CompletionTime = &now
		took := ""
		if rs.StartTime != nil {
			took = " in " + now.Sub(rs.StartTime.Time).Round(100*1e6).String()
			o.Metrics.releaseRolledOut(now.Sub(rs.StartTime.Time))
		}
		event(Event{corev1.EventTypeNormal, "ReleaseRolledOut", fmt.Sprintf("every node runs release %s%s", want.Version, took)})
	}
	var prevNodes []v1alpha1.NodeRelease
	if prev != nil && prev.Release == *want {
		prevNodes = prev.Nodes
	}
	rs.Nodes = ReleaseNodeStatuses(*want, nodes, prevNodes, d.Move, now)
	for _, c := range ReleaseConditions(*want, d, obj.Generation) {
		meta.SetStatusCondition(&rs.Conditions, c)
	}
	st.Release = rs
	o.Metrics.observeRelease(rs)
	return !d.Done && d.Failed == nil, nil
}

// failureSeen says prev already showed node n's failure.
func failureSeen(prev *v1alpha1.ReleaseStatus, n ReleaseNode) bool {
	if prev == nil {
		return false
	}
	for _, nr := range prev.Nodes {
		if nr.NodeName == n.Name {
			return nr.Failed == n.Failed
		}
	}
	return false
}

// releaseNodes reads every Node's release annotations and health.
func (o *Operator) releaseNodes(ctx context.Context, st *v1alpha1.KubeAPIServerStatus) ([]ReleaseNode, error) {
	list, err := o.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := o.Client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	unready := map[string][]string{}
	for _, p := range pods.Items {
		if _, mirror := p.Annotations[staticpod.MirrorAnnotation]; !mirror || p.Spec.NodeName == "" {
			continue
		}
		if !podutil.IsPodReady(&p) {
			unready[p.Spec.NodeName] = append(unready[p.Spec.NodeName], p.Name+" not Ready")
		}
	}
	var out []ReleaseNode
	for _, n := range list.Items {
		a := n.Annotations
		rn := ReleaseNode{Name: n.Name, Running: a[v1alpha1.ReleaseRunningAnnotation], Target: a[v1alpha1.ReleaseTargetAnnotation],
			Failed: a[v1alpha1.ReleaseFailedAnnotation], Reason: a[v1alpha1.ReleaseFailedReasonAnnotation], Message: a[v1alpha1.ReleaseFailedMessageAnnotation]}
		_, err := o.Client.CoreV1().ConfigMaps(v1alpha1.Namespace).Get(ctx, TemplatesName(n.Name), metav1.GetOptions{})
		switch {
		case err == nil:
			rn.Server = true
		case !apierrors.IsNotFound(err):
			return nil, err
		}
		var why []string
		if !nodeReady(&n) {
			why = append(why, "Node not Ready")
		}
		if s := a[v1alpha1.ReleaseSettlingAnnotation]; s != "" && s == rn.Running {
			why = append(why, fmt.Sprintf("settling on %s (its up watches its components for a crash loop before the move is done)", releaseVersion(s)))
		}
		if rn.Server {
			why = append(why, unready[n.Name]...)
			if settled, msg, err := o.revisionSettled(ctx, st, n.Name); err != nil {
				return nil, err
			} else if !settled {
				why = append(why, msg)
			}
		}
		rn.Healthy, rn.Unhealthy = len(why) == 0, strings.Join(why, ", ")
		out = append(out, rn)
	}
	return out, nil
}

// revisionSettled says the API server of node runs a revision rendered
// from its templates as they are: a server's move to a release renders
// its templates anew, and the revision made of them is the API server's
// move, which its startup monitor watches.
func (o *Operator) revisionSettled(ctx context.Context, st *v1alpha1.KubeAPIServerStatus, node string) (bool, string, error) {
	i := slices.IndexFunc(st.NodeStatuses, func(ns v1alpha1.NodeStatus) bool { return ns.NodeName == node })
	if i < 0 {
		return false, "its API server has no revision yet", nil
	}
	ns := st.NodeStatuses[i]
	if ns.TargetRevision != 0 {
		return false, fmt.Sprintf("its API server moves to revision %d", ns.TargetRevision), nil
	}
	latest := st.LatestAvailableRevision
	rendering, err := o.Client.CoreV1().ConfigMaps(v1alpha1.Namespace).Get(ctx, RenderingName(Operand, latest, node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if ns.CurrentRevision == latest {
			return true, "", nil
		}
		return false, fmt.Sprintf("its API server runs revision %d, not yet the latest, %d", ns.CurrentRevision, latest), nil
	}
	if err != nil {
		return false, "", err
	}
	tmpl, err := o.Client.CoreV1().ConfigMaps(v1alpha1.Namespace).Get(ctx, TemplatesName(node), metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	if rendering.Annotations[TemplatesHashAnnotation] != TemplatesHash(tmpl.Data) {
		return false, "its API server's new templates are not a revision yet", nil
	}
	if ns.CurrentRevision != latest {
		return false, fmt.Sprintf("its API server runs revision %d, not the latest, %d", ns.CurrentRevision, latest), nil
	}
	return true, "", nil
}

// releaseMoving is the node moving to another release, "" when none is
// (or no release is rolled).
func (o *Operator) releaseMoving(ctx context.Context, want *v1alpha1.Release) (string, error) {
	if want == nil {
		return "", nil
	}
	list, err := o.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	return MovingNode(list.Items), nil
}

// MovingNode is a node asked to move to a release it neither runs nor
// failed, "" when there is none.
func MovingNode(nodes []corev1.Node) string {
	for _, n := range nodes {
		a := n.Annotations
		if t := a[v1alpha1.ReleaseTargetAnnotation]; t != "" && t != a[v1alpha1.ReleaseRunningAnnotation] && t != a[v1alpha1.ReleaseFailedAnnotation] {
			return n.Name
		}
	}
	return ""
}

// revisionsBusy says which server's API server revision is rolling or due,
// "" when none is.
func revisionsBusy(st *v1alpha1.KubeAPIServerStatus) string {
	for _, ns := range st.NodeStatuses {
		if ns.TargetRevision != 0 {
			return fmt.Sprintf("node %s's API server has moved to revision %d", ns.NodeName, ns.TargetRevision)
		}
	}
	for _, ns := range st.NodeStatuses {
		if ns.CurrentRevision < st.LatestAvailableRevision && ns.LastFailedRevision < st.LatestAvailableRevision {
			return fmt.Sprintf("node %s's API server runs revision %d, the latest (%d)", ns.NodeName, ns.CurrentRevision, st.LatestAvailableRevision)
		}
	}
	return ""
}

// setReleaseTarget asks node to move to release.
func (o *Operator) setReleaseTarget(ctx context.Context, node, release string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.ReleaseTargetAnnotation: release}}})
	if err != nil {
		return err
	}
	_, err = o.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func nodeReady(n *corev1.Node) bool {
	_, c := nodeutil.GetNodeCondition(&n.Status, corev1.NodeReady)
	return c != nil && c.Status == corev1.ConditionTrue
}
