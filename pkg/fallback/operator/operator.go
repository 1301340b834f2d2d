// Package operator is the KubeAPIServer operator: it turns every change of
// the spec (and every due retry) into a new revision (immutable ConfigMaps
// and Secrets), installs the newest revision on one control-plane node at a
// time with an installer pod, reads from each node's API server mirror pod
// whether the revision rolled out or the startup monitor fell back, and
// reports it all in the status, conditions, Events and metrics.
package operator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/steadyplane/steadyplane/pkg/client/patient"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
)

// Operand is the static pod the operator manages.
const Operand = "kube-apiserver"

// Topology says whether revisions get a startup monitor.
type Topology string

// The topologies. Auto monitors on every control-plane node: the seed
// monitors only a single node (where no other API server keeps the cluster
// up while a revision fails), but a node of three that falls back keeps the
// cluster at three servers, and its fallback is what stops the rollout.
// Off leaves a failing revision failing on its node, as upstream HA does.
const (
	TopologyAuto Topology = "auto"
	TopologyOn   Topology = "on"
	TopologyOff  Topology = "off"
)

// WithMonitor says whether a revision installed now gets a startup monitor.
func (t Topology) WithMonitor() bool { return t != TopologyOff }

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
	// A release rolls through the Nodes' annotations.
	nodes := informer(cache.NewListWatchFromClient(core, "nodes", metav1.NamespaceAll, fields.Everything()), &corev1.Node{})
	for _, inf := range []cache.SharedIndexInformer{cms, secrets, installers, mirrors, kubeAPIServers, nodes} {
		handler := cache.ResourceEventHandler(enqueue)
		if inf == nodes {
			// Nodes change at every heartbeat; a rollout looks only at
			// their release annotations and readiness.
			handler = cache.ResourceEventHandlerFuncs{AddFunc: enqueue.AddFunc, DeleteFunc: enqueue.DeleteFunc,
				UpdateFunc: func(old, cur any) {
					if releaseFacts(old) != releaseFacts(cur) {
						o.queue.Add(v1alpha1.Name)
					}
				}}
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
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

// operandSelector selects the operand's mirror pods in kube-system.
const operandSelector = "component=" + Operand

// releaseFacts is what a release rollout reads of a Node.
func releaseFacts(obj any) string {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return ""
	}
	a := n.Annotations
	return fmt.Sprint(a[v1alpha1.ReleaseTargetAnnotation], a[v1alpha1.ReleaseRunningAnnotation], a[v1alpha1.ReleaseFailedAnnotation],
		a[v1alpha1.ReleaseSettlingAnnotation], nodeReady(n))
}
