// Package operator is the KubeAPIServer operator: it turns every change of
// the spec (and every due retry) into a new revision (immutable ConfigMaps
// and Secrets), installs the newest revision on one control-plane node at a
// time with an installer pod, reads from each node's API server mirror pod
// whether the revision rolled out or the startup monitor fell back, and
// reports it all in the status, conditions, Events and metrics.
package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/steadyplane/steadyplane/pkg/client/patient"
	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// Operand is the static pod the operator manages.
const Operand = "kube-apiserver"

// Topology says whether revisions get a startup monitor.
type Topology string

// The topologies: Auto monitors on a single control-plane node (where no
// other API server keeps the cluster up while a revision fails).
const (
	TopologyAuto Topology = "auto"
	TopologyOn   Topology = "on"
	TopologyOff  Topology = "off"
)

// WithMonitor says whether a revision installed now gets a startup monitor.
func (t Topology) WithMonitor(controlPlaneNodes int) bool {
	switch t {
	case TopologyOn:
		return true
	case TopologyOff:
		return false
	}
	return controlPlaneNodes <= 1
}

// Operator reconciles the KubeAPIServer "cluster".
type Operator struct {
	Client   kubernetes.Interface
	API      v1alpha1.Client
	Recorder record.EventRecorder
	Clock    clock.Clock
	Retry    RetryPolicy
	Topology Topology
	// Keep is how many revisions are kept (in the API and on nodes)
	// besides the ones in use.
	Keep    int
	Log     *slog.Logger
	Metrics *Metrics

	apiPods, installers corelisters.PodNamespaceLister
	cmLister            corelisters.ConfigMapNamespaceLister
	secretLister        corelisters.SecretNamespaceLister
	queue               workqueue.TypedRateLimitingInterface[string]
}

// Run watches the inputs and reconciles on every change until ctx ends.
func (o *Operator) Run(ctx context.Context) error {
	// One object, and its failures are an API server that is restarting
	// (a rollout): the default backoff (5ms doubling to 1000s) would wait
	// 20-80s after a few seconds of outage; a verdict is due within seconds.
	o.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, syncRetryMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubeapiserver"})
	defer o.queue.ShutDown()
	enqueue := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { o.queue.Add(v1alpha1.Name) },
		UpdateFunc: func(any, any) { o.queue.Add(v1alpha1.Name) },
		DeleteFunc: func(any) { o.queue.Add(v1alpha1.Name) },
	}
	// Patient list and watch: every rollout restarts the API server, and a
	// plain reflector's backoff after restarts close together would hide a
	// spec change for up to a minute.
	informer := func(lw cache.ListerWatcher, obj runtime.Object) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(patient.ListerWatcher(ctx, lw, patient.DefaultOptions), obj, 10*time.Minute,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	core := o.Client.CoreV1().RESTClient()
	cms := informer(cache.NewListWatchFromClient(core, "configmaps", v1alpha1.Namespace, fields.Everything()), &corev1.ConfigMap{})
	secrets := informer(cache.NewListWatchFromClient(core, "secrets", v1alpha1.Namespace, fields.Everything()), &corev1.Secret{})
	installers := informer(cache.NewListWatchFromClient(core, "pods", v1alpha1.Namespace, fields.Everything()), &corev1.Pod{})
	mirrors := informer(cache.NewFilteredListWatchFromClient(core, "pods", metav1.NamespaceSystem,
		func(lo *metav1.ListOptions) { lo.LabelSelector = operandSelector }), &corev1.Pod{})
	api := o.API.Dynamic.Resource(v1alpha1.GroupVersionResource)
	kubeAPIServers := informer(&cache.ListWatch{
		ListFunc:  func(lo metav1.ListOptions) (runtime.Object, error) { return api.List(ctx, lo) },
		WatchFunc: func(lo metav1.ListOptions) (watch.Interface, error) { return api.Watch(ctx, lo) },
	}, &unstructured.Unstructured{})
	var synced []cache.InformerSynced
	for _, inf := range []cache.SharedIndexInformer{cms, secrets, installers, mirrors, kubeAPIServers} {
		if _, err := inf.AddEventHandler(enqueue); err != nil {
			return err
		}
		synced = append(synced, inf.HasSynced)
		go inf.Run(ctx.Done())
	}
	o.cmLister = corelisters.NewConfigMapLister(cms.GetIndexer()).ConfigMaps(v1alpha1.Namespace)
	o.secretLister = corelisters.NewSecretLister(secrets.GetIndexer()).Secrets(v1alpha1.Namespace)
	o.installers = corelisters.NewPodLister(installers.GetIndexer()).Pods(v1alpha1.Namespace)
	o.apiPods = corelisters.NewPodLister(mirrors.GetIndexer()).Pods(metav1.NamespaceSystem)
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	o.Log.Info("operator started", "retryBase", o.Retry.Base, "retryMax", o.Retry.Max, "topology", o.Topology, "keep", o.Keep)
	go func() { <-ctx.Done(); o.queue.ShutDown() }()
	o.queue.Add(v1alpha1.Name)
	for {
		key, quit := o.queue.Get()
		if quit {
			return nil
		}
		next, err := o.Sync(ctx)
		switch {
		case err != nil:
			o.Log.Error("sync failed; retrying", "error", err)
			o.queue.AddRateLimited(key)
		default:
			o.queue.Forget(key)
			if next > 0 {
				o.queue.AddAfter(key, next)
			}
		}
		o.queue.Done(key)
	}
}

// syncRetryMax bounds the wait before a failed sync is tried again.
const syncRetryMax = 2 * time.Second

// Sync reconciles once. It returns when to look again without a change
// (a retry that is due later), or 0.
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
	ref := &corev1.ObjectReference{APIVersion: v1alpha1.Group + "/" + v1alpha1.Version, Kind: v1alpha1.Kind, Name: obj.Name, UID: obj.UID}
	event := func(e Event) {
		o.Recorder.Event(ref, e.Type, e.Reason, e.Message)
		o.Log.Info(e.Message, "reason", e.Reason)
	}

	// Observe the nodes first: a fallback seen now decides a retry below.
	mirrors, err := o.mirrors(ctx, inFlight(st.NodeStatuses))
	if err != nil {
		return 0, err
	}
	st.NodeStatuses = SortNodes(st.NodeStatuses, slices.Sorted(maps.Keys(mirrors)))
	for i, ns := range st.NodeStatuses {
		var evs []Event
		st.NodeStatuses[i], evs = ObserveNode(ns, mirrors[ns.NodeName], o.installed(ns), now)
		for _, e := range evs {
			event(e)
			if e.Reason == "RevisionFallback" {
				o.Metrics.fallback(st.NodeStatuses[i].LastFailedReason)
			}
		}
	}

	// A new revision when the inputs changed, or a retry is due.
	var next time.Duration
	inputs, inputErr := o.inputs(obj.Spec)
	latest, latestHash, err := o.latestRevision()
	if err != nil {
		return 0, err
	}
	if inputErr == nil {
		cause := ""
		if hash := inputs.Hash(); hash != latestHash {
			cause = "the spec or the templates changed"
			if latest == 0 {
				cause = "first revision"
			}
		} else if ns, failed := Failed(st.NodeStatuses, latest); failed {
			if at, retried := o.Retry.RetryAt(ns); retried {
				if wait := at.Sub(now.Time); wait > 0 {
					next = wait
				} else {
					cause = fmt.Sprintf("retry of revision %d, which failed with %s (fallback %d)", latest, ns.LastFailedReason, ns.LastFallbackCount)
				}
			}
		}
		if cause != "" {
			created, err := o.createRevision(ctx, latest+1, inputs, cause)
			if err != nil {
				return 0, err
			}
			latest++
			// Not created: this sync's informer had not seen the revision an
			// earlier sync made (whose status update then failed); it was
			// announced then.
			if created {
				reason := "RevisionCreated"
				if strings.HasPrefix(cause, "retry") {
					reason = "RevisionRetry"
				}
				o.Metrics.revision(reason)
				event(Event{corev1.EventTypeNormal, reason, fmt.Sprintf("revision %d: %s", latest, cause)})
			}
		}
	}
	st.LatestAvailableRevision = latest

	// Install the latest revision on the next node.
	if node, ok := NextInstall(st.NodeStatuses, latest); ok && latest > 0 {
		i := slices.IndexFunc(st.NodeStatuses, func(ns v1alpha1.NodeStatus) bool { return ns.NodeName == node })
		withMonitor := o.Topology.WithMonitor(len(st.NodeStatuses))
		if err := o.startInstaller(ctx, node, latest, st.NodeStatuses[i].LastFailedRevision, withMonitor); err != nil {
			return 0, err
		}
		st.NodeStatuses[i].TargetRevision = latest
		event(Event{corev1.EventTypeNormal, "InstallerStarted", fmt.Sprintf("node %s: installing revision %d (from %d; startup monitor %v)",
			node, latest, st.NodeStatuses[i].CurrentRevision, withMonitor)})
	}

	for _, c := range Conditions(*st, o.Retry, obj.Generation) {
		if c.Type == v1alpha1.ConditionDegraded && inputErr != nil {
			c.Status, c.Reason, c.Message = metav1.ConditionTrue, "InvalidInput", inputErr.Error()
		}
		meta.SetStatusCondition(&st.Conditions, c)
	}
	o.Metrics.observe(*st)
	if !equality.Semantic.DeepEqual(*st, obj.Status) {
		obj.Status = *st
		if _, err := o.API.UpdateStatus(ctx, obj); err != nil {
			return 0, err
		}
	}
	if inFlight(st.NodeStatuses) && (next == 0 || next > inFlightPoll) {
		next = inFlightPoll
	}
	return next, o.prune(ctx, st)
}

// inFlightPoll is how often a rollout in flight is looked at without an
// event (the informers' events lag after an API server restart).
const inFlightPoll = 2 * time.Second

// operandSelector selects the operand's mirror pods in kube-system.
const operandSelector = "component=" + Operand

// inFlight tells whether a node is installing or starting a revision.
func inFlight(nodes []v1alpha1.NodeStatus) bool {
	return slices.ContainsFunc(nodes, func(ns v1alpha1.NodeStatus) bool { return ns.TargetRevision != 0 })
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
	in := Inputs{Spec: spec, ConfigMaps: map[string]map[string]string{}, Secrets: map[string]map[string][]byte{}}
	tmpl, err := o.cmLister.Get(TemplatesConfigMap)
	if err != nil {
		return in, fmt.Errorf("ConfigMap %s/%s (written by steadyplane up): %w", v1alpha1.Namespace, TemplatesConfigMap, err)
	}
	in.Templates = tmpl.Data
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

// revisionSelector selects the operand's revision ConfigMaps.
func revisionSelector() labels.Selector {
	r, _ := labels.NewRequirement(RevisionLabel, selection.Exists, nil)
	c, _ := labels.NewRequirement("component", selection.Equals, []string{Operand})
	return labels.NewSelector().Add(*r, *c)
}

// revisionLabels are the labels of revision n's objects: what prune
// deletes them by.
func revisionLabels(n int32) map[string]string {
	return map[string]string{RevisionLabel: strconv.Itoa(int(n)), "component": Operand, "app.kubernetes.io/managed-by": "steadyplane"}
}

// revisionOf is the number of the revision whose ConfigMap cm is; false for
// its copies of the user's ConfigMaps, which carry the label too.
func revisionOf(cm *corev1.ConfigMap) (int32, bool) {
	n := atoi32(cm.Labels[RevisionLabel])
	return n, n > 0 && cm.Name == RevisionName(Operand, n)
}

// latestRevision returns the newest revision in the API and its input hash.
func (o *Operator) latestRevision() (int32, string, error) {
	cms, err := o.cmLister.List(revisionSelector())
	if err != nil {
		return 0, "", err
	}
	var n int32
	hash := ""
	for _, cm := range cms {
		if r, ok := revisionOf(cm); ok && r > n {
			n, hash = r, cm.Annotations[InputHashAnnotation]
		}
	}
	return n, hash, nil
}

// createRevision makes revision n: copies of the user's ConfigMaps and
// Secrets, then the revision ConfigMap (last: its existence means the
// revision is whole), all immutable. created is false when the revision
// ConfigMap existed already.
func (o *Operator) createRevision(ctx context.Context, n int32, in Inputs, cause string) (created bool, err error) {
	t, err := ParseTemplates(in.Templates)
	if err != nil {
		return false, err
	}
	objMeta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: v1alpha1.Namespace, Labels: revisionLabels(n)}
	}
	immutable := true
	for _, name := range slices.Sorted(maps.Keys(in.ConfigMaps)) {
		cm := &corev1.ConfigMap{ObjectMeta: objMeta(CopyName(name, n)), Data: in.ConfigMaps[name], BinaryData: in.ConfigMapsBinary[name], Immutable: &immutable}
		if _, err := o.Client.CoreV1().ConfigMaps(v1alpha1.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(in.Secrets)) {
		s := &corev1.Secret{ObjectMeta: objMeta(CopyName(name, n)), Data: in.Secrets[name], Immutable: &immutable}
		if _, err := o.Client.CoreV1().Secrets(v1alpha1.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
	}
	cm, err := RevisionConfigMap(t, in, n, cause)
	if err != nil {
		return false, err
	}
	_, err = o.Client.CoreV1().ConfigMaps(v1alpha1.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	return err == nil, err
}

// RevisionConfigMap is revision n's ConfigMap: both manifests, the input
// hash, the names of the copied objects and the cause. "up" makes the
// bootstrap revision with it too, so that the operator finds it whole.
func RevisionConfigMap(t Templates, in Inputs, n int32, cause string) (*corev1.ConfigMap, error) {
	operand, err := RenderOperand(t, in.Spec, n)
	if err != nil {
		return nil, err
	}
	operandYAML, err := yaml.Marshal(operand)
	if err != nil {
		return nil, err
	}
	monitorYAML, err := yaml.Marshal(RenderMonitor(t, n))
	if err != nil {
		return nil, err
	}
	cms, _ := json.Marshal(slices.Sorted(maps.Keys(in.ConfigMaps)))
	secrets, _ := json.Marshal(slices.Sorted(maps.Keys(in.Secrets)))
	immutable := true
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RevisionName(Operand, n), Namespace: v1alpha1.Namespace,
			Labels:      revisionLabels(n),
			Annotations: map[string]string{InputHashAnnotation: in.Hash(), ConfigMapsAnnotation: string(cms), SecretsAnnotation: string(secrets), CauseAnnotation: cause}},
		Data:      map[string]string{RevisionOperandKey: string(operandYAML), RevisionMonitorKey: string(monitorYAML)},
		Immutable: &immutable,
	}, nil
}

// startInstaller creates the installer pod of revision n on node, from the
// template in the templates ConfigMap.
func (o *Operator) startInstaller(ctx context.Context, node string, n, lastFailed int32, withMonitor bool) error {
	tmpl, err := o.cmLister.Get(TemplatesConfigMap)
	if err != nil {
		return err
	}
	t, err := ParseTemplates(tmpl.Data)
	if err != nil {
		return err
	}
	pod := RenderInstaller(t, node, n, lastFailed, withMonitor)
	_, err = o.Client.CoreV1().Pods(v1alpha1.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// prune deletes revisions no node uses beyond the newest Keep, with their
// copies, and installer pods that finished.
func (o *Operator) prune(ctx context.Context, st *v1alpha1.KubeAPIServerStatus) error {
	if o.Keep < 1 {
		return nil
	}
	cms, err := o.cmLister.List(revisionSelector())
	if err != nil {
		return err
	}
	var all []int
	for _, cm := range cms {
		if n, ok := revisionOf(cm); ok {
			all = append(all, int(n))
		}
	}
	for _, n := range Prunable(all, o.Keep, *st) {
		sel := labels.SelectorFromSet(labels.Set{RevisionLabel: strconv.Itoa(n), "component": Operand})
		for _, del := range []func() error{
			func() error {
				return o.Client.CoreV1().ConfigMaps(v1alpha1.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel.String()})
			},
			func() error {
				return o.Client.CoreV1().Secrets(v1alpha1.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel.String()})
			},
		} {
			if err := del(); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		o.Log.Info("pruned revision", "revision", n)
	}
	pods, err := o.installers.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded && atoi32(p.Labels[RevisionLabel]) < st.LatestAvailableRevision {
			if err := o.Client.CoreV1().Pods(v1alpha1.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}

func atoi32(s string) int32 {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}

// deepCopy copies a status (no generated deep-copy functions for this API).
func deepCopy(st v1alpha1.KubeAPIServerStatus) *v1alpha1.KubeAPIServerStatus {
	var out v1alpha1.KubeAPIServerStatus
	b, _ := json.Marshal(st)
	_ = json.Unmarshal(b, &out)
	return &out
}
