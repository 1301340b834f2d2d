package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// Sync reconciles once: it observes the nodes, the inputs and the
// revisions, decides with the pure functions of decide.go, then acts. It
// returns when to look again without a change (a retry that is due later,
// or a rollout in flight), or 0.
func (o *Operator) Sync(ctx context.Context) (time.Duration, error) {
	obj, err := o.API.Get(ctx, v1alpha1.Name)
	if apierrors.IsNotFound(err) {
		return 0, nil // "up" creates it; its creation wakes us
	}
	if err != nil {
		return 0, err
	}
	now := metav1.NewTime(o.Clock.Now())
	st := deepCopy(obj.Status)
	event := o.eventer(obj)

	// The nodes first: a fallback seen now decides a retry below.
	if err := o.observeNodes(ctx, st, now, event); err != nil {
		return 0, err
	}
	in, inputErr := o.inputs(obj.Spec)
	latest, latestHash, err := o.latestRevision()
	if err != nil {
		return 0, err
	}
	stale, err := o.staleTemplates(latest)
	if err != nil {
		return 0, err
	}

	rev := NextRevision(RevisionState{Latest: latest, LatestHash: latestHash, InputHash: in.Hash(), InputErr: inputErr, Nodes: st.NodeStatuses, StaleTemplates: stale},
		o.Retry, now.Time)
	if rev.New() {
		if err := o.newRevision(ctx, rev, in, event); err != nil {
			return 0, err
		}
		latest = rev.Revision
	}
	st.LatestAvailableRevision = latest

	// A node that cannot be installed (its templates missing or broken)
	// holds the rollout, but what was observed is still written, and the
	// sync is retried with the error.
	var installErr error
	if node, ok := NextInstall(st.NodeStatuses, latest); ok && latest > 0 {
		// A server handing over to a release has its control plane down:
		// the revision waits, so that one API server is down at a time.
		moving, err := o.releaseMoving(ctx, obj.Spec.Release)
		switch {
		case err != nil:
			installErr = err
		case moving != "":
			o.Log.Info("revision waits for a release move", "revision", latest, "node", node, "moving", moving)
		default:
			if installErr = o.install(ctx, st, node, event); installErr != nil {
				event(Event{corev1.EventTypeWarning, "InstallFailed", fmt.Sprintf("node %s: revision %d: %v", node, latest, installErr)})
			}
		}
	}

	for _, c := range conditions(*st, o.Retry, obj.Generation, inputErr) {
		meta.SetStatusCondition(&st.Conditions, c)
	}
	rolling, releaseErr := o.syncRelease(ctx, obj, st, event)
	o.Metrics.observe(*st)
	if err := o.updateStatus(ctx, obj, *st); err != nil {
		return 0, err
	}
	if err := errors.Join(installErr, releaseErr); err != nil {
		return 0, err
	}
	next := requeueAfter(rev.RetryIn, st.NodeStatuses)
	if rolling && (next == 0 || next > inFlightPoll) {
		next = inFlightPoll
	}
	return next, o.prune(ctx, st)
}

// eventer records Events on obj, and logs them: the Events of a rollout may
// not reach an API server that is restarting.
func (o *Operator) eventer(obj *v1alpha1.KubeAPIServer) func(Event) {
	ref := &corev1.ObjectReference{APIVersion: v1alpha1.Group + "/" + v1alpha1.Version, Kind: v1alpha1.Kind, Name: obj.Name, UID: obj.UID}
	return func(e Event) {
		o.Recorder.Event(ref, e.Type, e.Reason, e.Message)
		o.Log.Info(e.Message, "reason", e.Reason)
	}
}

// observeNodes brings st's node statuses up to date with the mirror pods
// (ObserveNode), with a status for each node that appeared.
func (o *Operator) observeNodes(ctx context.Context, st *v1alpha1.KubeAPIServerStatus, now metav1.Time, event func(Event)) error {
	mirrors, err := o.mirrors(ctx, inFlight(st.NodeStatuses))
	if err != nil {
		return err
	}
	st.NodeStatuses = SortNodes(st.NodeStatuses, slices.Sorted(maps.Keys(mirrors)))
	// A server removed from the cluster (its Node deleted) has no mirror
	// pod either: its status would hold a rollout up forever.
	var removed []string
	for _, ns := range st.NodeStatuses {
		if mirrors[ns.NodeName] != nil {
			continue
		}
		if _, err := o.Client.CoreV1().Nodes().Get(ctx, ns.NodeName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			removed = append(removed, ns.NodeName)
		}
	}
	st.NodeStatuses = WithoutNodes(st.NodeStatuses, removed)
	for _, n := range removed {
		event(Event{corev1.EventTypeNormal, "NodeRemoved", fmt.Sprintf("node %s: removed from the cluster, no longer rolled", n)})
	}
	for i, ns := range st.NodeStatuses {
		if err := o.retryFailedInstaller(ctx, ns, now.Time, event); err != nil {
			return err
		}
		var evs []Event
		st.NodeStatuses[i], evs = ObserveNode(ns, mirrors[ns.NodeName], o.installed(ns), now)
		for _, e := range evs {
			event(e)
			if e.Reason == "RevisionFallback" {
				o.Metrics.fallback(st.NodeStatuses[i].LastFailedReason)
			}
		}
	}
	return nil
}

// newRevision makes the revision NextRevision decided on, from in.
func (o *Operator) newRevision(ctx context.Context, rev RevisionDecision, in Inputs, event func(Event)) error {
	created, err := o.createRevision(ctx, rev.Revision, in, rev.Cause.String())
	// Not created: this sync's informer had not seen the revision an
	// earlier sync made (whose status update then failed); it was
	// announced then.
	if err != nil || !created {
		return err
	}
	reason := rev.Cause.EventReason()
	o.Metrics.revision(reason)
	event(Event{corev1.EventTypeNormal, reason, fmt.Sprintf("revision %d: %s", rev.Revision, rev.Cause)})
	return nil
}

// install starts the installer of the latest revision on node, and makes
// that revision the node's target: the rollout is in flight from now on,
// before the installer pod shows in the informer.
func (o *Operator) install(ctx context.Context, st *v1alpha1.KubeAPIServerStatus, node string, event func(Event)) error {
	latest := st.LatestAvailableRevision
	i := slices.IndexFunc(st.NodeStatuses, func(ns v1alpha1.NodeStatus) bool { return ns.NodeName == node })
	withMonitor := o.Topology.WithMonitor()
	if err := o.ensureRendering(ctx, latest, node); err != nil {
		return err
	}
	if err := o.startInstaller(ctx, node, latest, st.NodeStatuses[i].LastFailedRevision, withMonitor); err != nil {
		return err
	}
	st.NodeStatuses[i].TargetRevision = latest
	event(Event{corev1.EventTypeNormal, "InstallerStarted", fmt.Sprintf("node %s: installing revision %d (from %d; startup monitor %v)",
		node, latest, st.NodeStatuses[i].CurrentRevision, withMonitor)})
	return nil
}

// updateStatus writes st as obj's status when it changed: most syncs change
// nothing, and a write to an API server that is restarting fails the sync.
func (o *Operator) updateStatus(ctx context.Context, obj *v1alpha1.KubeAPIServer, st v1alpha1.KubeAPIServerStatus) error {
	if equality.Semantic.DeepEqual(st, obj.Status) {
		return nil
	}
	obj.Status = st
	_, err := o.API.UpdateStatus(ctx, obj)
	return err
}

// mirrors reads each node's operand mirror pod: from the informer, or,
// while a rollout is in flight, from the API server itself. The informer's
// watch comes back only with its backoff after the API server restarted
// (up to tens of seconds), and the verdict on the rollout is due now.
func (o *Operator) mirrors(ctx context.Context, live bool) (map[string]*Mirror, error) {
	var pods []*corev1.Pod
	if live {
		list, err := o.Client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: operandSelector})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			pods = append(pods, &list.Items[i])
		}
	} else {
		var err error
		if pods, err = o.apiPods.List(labels.Everything()); err != nil {
			return nil, err
		}
	}
	out := map[string]*Mirror{}
	for _, p := range pods {
		if _, mirror := p.Annotations[staticpod.MirrorAnnotation]; !mirror || p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		if _, revisioned := p.Annotations[fallback.RevisionAnnotation]; !revisioned {
			// A server that runs its API server without revisions
			// (--static-pod-fallback=off) is not this operator's to roll.
			continue
		}
		m := &Mirror{Revision: atoi32(p.Annotations[fallback.RevisionAnnotation]), FallbackFor: atoi32(p.Annotations[fallback.FallbackForRevisionAnnotation]),
			Reason: p.Annotations[fallback.FallbackReasonAnnotation], Message: p.Annotations[fallback.FallbackMessageAnnotation],
			Created: p.CreationTimestamp.Time}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				m.Ready = c.Status == corev1.ConditionTrue
			}
		}
		out[p.Spec.NodeName] = m
	}
	return out, nil
}

// installerRetryDelay is how long a failed installer stays before it is
// made again: its Event and status are there to read, and one that fails
// at once does not spin.
const installerRetryDelay = 10 * time.Second

// retryFailedInstaller makes the installer of ns's target revision again
// when it failed (evicted under disk pressure, killed, its node
// restarted): nothing else writes the revision's files, and the rollout
// would wait for them for ever. A bad revision is not the installer's to
// judge: it only copies files, and the startup monitor falls back from
// what does not start.
func (o *Operator) retryFailedInstaller(ctx context.Context, ns v1alpha1.NodeStatus, now time.Time, event func(Event)) error {
	if ns.TargetRevision == 0 || ns.TargetRevision == ns.CurrentRevision {
		return nil
	}
	p, err := o.installers.Get(InstallerName(ns.NodeName, ns.TargetRevision))
	if err != nil || !InstallerFailed(p, now) {
		return nil
	}
	err = o.Client.CoreV1().Pods(v1alpha1.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
	switch {
	case apierrors.IsConflict(err):
		return nil // made again already; the informer is behind
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	event(Event{corev1.EventTypeWarning, "InstallerFailed", fmt.Sprintf("node %s: the installer of revision %d failed (%s); starting it again",
		ns.NodeName, ns.TargetRevision, cmp.Or(p.Status.Message, p.Status.Reason, "no reason given"))})
	return o.startInstaller(ctx, ns.NodeName, ns.TargetRevision, ns.LastFailedRevision, o.Topology.WithMonitor())
}

// InstallerFailed says installer pod p failed at least installerRetryDelay
// before now.
func InstallerFailed(p *corev1.Pod, now time.Time) bool {
	if p.Status.Phase != corev1.PodFailed {
		return false
	}
	ended := p.CreationTimestamp.Time
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(ended) {
			ended = t.FinishedAt.Time
		}
	}
	return now.Sub(ended) >= installerRetryDelay
}

// installed is when the installer of ns's target revision finished; zero
// while it runs, or when there is none.
func (o *Operator) installed(ns v1alpha1.NodeStatus) time.Time {
	if ns.TargetRevision == 0 {
		return time.Time{}
	}
	p, err := o.installers.Get(InstallerName(ns.NodeName, ns.TargetRevision))
	if err != nil || p.Status.Phase != corev1.PodSucceeded {
		return time.Time{}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return t.FinishedAt.Time
		}
	}
	return time.Time{}
}

// inputs gathers what a revision is made of; an error names what is missing.
func (o *Operator) inputs(spec v1alpha1.KubeAPIServerSpec) (Inputs, error) {
	// The release is no input of a revision: a server's move to it renders
	// its templates anew, which makes the revision.
	spec.Release = nil
	in := Inputs{Spec: spec, ConfigMaps: map[string]map[string]string{}, Secrets: map[string]map[string][]byte{}}
	for _, name := range spec.ConfigMaps {
		cm, err := o.cmLister.Get(name)
		if err != nil {
			return in, fmt.Errorf("spec.configMaps: ConfigMap %s/%s: %w", v1alpha1.Namespace, name, err)
		}
		in.ConfigMaps[name] = cm.Data
		if len(cm.BinaryData) > 0 {
			if in.ConfigMapsBinary == nil {
				in.ConfigMapsBinary = map[string]map[string][]byte{}
			}
			in.ConfigMapsBinary[name] = cm.BinaryData
		}
	}
	for _, name := range spec.Secrets {
		s, err := o.secretLister.Get(name)
		if err != nil {
			return in, fmt.Errorf("spec.secrets: Secret %s/%s: %w", v1alpha1.Namespace, name, err)
		}
		in.Secrets[name] = s.Data
	}
	return in, nil
}

// deepCopy copies a status (no generated deep-copy functions for this API).
func deepCopy(st v1alpha1.KubeAPIServerStatus) *v1alpha1.KubeAPIServerStatus {
	var out v1alpha1.KubeAPIServerStatus
	b, _ := json.Marshal(st)
	_ = json.Unmarshal(b, &out)
	return &out
}
