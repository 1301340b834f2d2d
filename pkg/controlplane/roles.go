package controlplane

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/steadyplane/steadyplane/pkg/addons/servicelb"
)

// ControlPlaneRoleLabel marks a server's Node, as kubeadm and k3s mark
// theirs: kubectl get nodes shows it as the role control-plane. The node
// agent cannot set it (NodeRestriction keeps a node from labelling itself
// with node-role.kubernetes.io/), so up does, as the cluster's admin. The
// load balancers reserve the servers' own ports by it.
const ControlPlaneRoleLabel = servicelb.ServerLabel

// controlPlaneTaint is the taint up --control-plane-taint puts on a
// server's Node (kubeadm's): only pods that tolerate it are scheduled
// there. Off by default: on a single server, workloads must run there.
var controlPlaneTaint = corev1.Taint{Key: ControlPlaneRoleLabel, Effect: corev1.TaintEffectNoSchedule}

// controlPlaneTaintAnnotation records that up put controlPlaneTaint there,
// so that a start without --control-plane-taint takes off its own taint
// and never one an administrator put there with kubectl taint.
const controlPlaneTaintAnnotation = "steadyplane.io/control-plane-taint"

// MarkControlPlane returns node as a server's Node must be: labelled with
// ControlPlaneRoleLabel, tainted with controlPlaneTaint when taint is set,
// and without the taint up put there earlier when not; changed is false
// when node already is so (node itself is never modified). The same taint
// put there by hand is left as it is, and never claimed as up's.
func MarkControlPlane(node *corev1.Node, taint bool) (marked *corev1.Node, changed bool) {
	marked = node.DeepCopy()
	if _, ok := marked.Labels[ControlPlaneRoleLabel]; !ok {
		if marked.Labels == nil {
			marked.Labels = map[string]string{}
		}
		marked.Labels[ControlPlaneRoleLabel] = ""
		changed = true
	}
	isOurs := func(t corev1.Taint) bool {
		return t.Key == controlPlaneTaint.Key && t.Effect == controlPlaneTaint.Effect
	}
	has := slices.ContainsFunc(marked.Spec.Taints, isOurs)
	_, ours := marked.Annotations[controlPlaneTaintAnnotation]
	switch {
	case taint && !has:
		marked.Spec.Taints = append(marked.Spec.Taints, controlPlaneTaint)
		if marked.Annotations == nil {
			marked.Annotations = map[string]string{}
		}
		marked.Annotations[controlPlaneTaintAnnotation] = "up --control-plane-taint"
		changed = true
	case !taint && ours:
		marked.Spec.Taints = slices.DeleteFunc(marked.Spec.Taints, isOurs)
		delete(marked.Annotations, controlPlaneTaintAnnotation)
		changed = true
	}
	return marked, changed
}

// markBackoff spaces markControlPlane's attempts: 0.5 s doubling, six
// in all (about 15 s).
var markBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 6, Cap: 8 * time.Second}

// markControlPlane brings this server's Node to MarkControlPlane's, read
// and written again on a conflict (the node agent writes its status all
// along). A failure is said and leaves the Node as it was: it costs the
// role's label, never the control plane.
func (cp *ControlPlane) markControlPlane(ctx context.Context, client kubernetes.Interface) {
	var marked *corev1.Node
	// Conflicts, and the brief errors of a cluster whose servers come and
	// go (a leader election, a timeout, throttling), are tried again for
	// some 15 s; a refusal is not.
	transient := func(err error) bool {
		return !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil
	}
	err := retry.OnError(markBackoff, transient, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, cp.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		next, changed := MarkControlPlane(node, cp.opts.ControlPlaneTaint)
		if !changed {
			return nil
		}
		marked, err = client.CoreV1().Nodes().Update(ctx, next, metav1.UpdateOptions{FieldManager: "steadyplane-up"})
		return err
	})
	switch {
	case err != nil:
		cp.progressf("node %s: could not mark it a control-plane node (label %s): %v", cp.opts.NodeName, ControlPlaneRoleLabel, err)
	case marked != nil && cp.opts.ControlPlaneTaint:
		cp.progressf("node %s: role control-plane, tainted %s:%s (only pods that tolerate it run here)", cp.opts.NodeName, controlPlaneTaint.Key, controlPlaneTaint.Effect)
	case marked != nil:
		cp.progressf("node %s: role control-plane (label %s); untainted, pods run here", cp.opts.NodeName, ControlPlaneRoleLabel)
	}
}
