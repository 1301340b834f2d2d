// Package conditionctl is a library for "a controller that owns one pod
// condition type", the building block of Pod Ready++ features: it watches the
// pods that carry its readiness gate, asks a Check for each, and PATCHes that
// one condition, with a UID precondition, only when it changes. The node
// agent folds the condition into the pod's Ready condition.
//
//	c := &conditionctl.Controller{Client: cs, ConditionType: "example.com/ready", Check: myCheck}
//	go c.Run(ctx)
package conditionctl

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Result is a check's verdict on one pod.
type Result struct {
	Status  corev1.ConditionStatus
	Reason  string
	Message string
}

// HasGate reports whether pod's spec lists t among its readiness gates.
func HasGate(pod *corev1.Pod, t corev1.PodConditionType) bool {
	return slices.ContainsFunc(pod.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return g.ConditionType == t })
}

// ConditionPatch returns the strategic-merge patch of the status subresource
// that sets pod's condition t to r, or nil when the pod has it already.
// lastTransitionTime is now when the status changes and kept otherwise; the
// patch carries the pod's UID, so it cannot land on a new pod of the same name.
func ConditionPatch(pod *corev1.Pod, t corev1.PodConditionType, r Result, now metav1.Time) ([]byte, error) {
	cond := corev1.PodCondition{Type: t, Status: r.Status, Reason: r.Reason, Message: r.Message, LastTransitionTime: now}
	for _, c := range pod.Status.Conditions {
		if c.Type != t {
			continue
		}
		if c.Status == r.Status && c.Reason == r.Reason && c.Message == r.Message {
			return nil, nil
		}
		if c.Status == r.Status {
			cond.LastTransitionTime = c.LastTransitionTime
		}
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status":   map[string]any{"conditions": []corev1.PodCondition{cond}},
	})
}

// Controller keeps one condition type up to date on every pod whose
// readiness gates list it.
type Controller struct {
	// Client talks to the API server; it needs to list and watch pods and to
	// patch pods/status.
	Client kubernetes.Interface
	// ConditionType is the condition (and readiness gate) the controller owns.
	ConditionType corev1.PodConditionType
	// Check computes the condition for a pod.
	Check func(ctx context.Context, pod *corev1.Pod) Result
	// Interval is how often each pod whose condition is True is checked
	// again; 0 means 5s.
	Interval time.Duration
	// PendingInterval is how often each pod whose condition is not True is
	// checked again, so that it turns True soon after its target is ready;
	// 0 means 500ms.
	PendingInterval time.Duration
	// Workers is how many pods are checked at once; 0 means 4.
	Workers int
}

var (
	metricsOnce sync.Once
	checks      = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_readiness_gate_checks_total", Help: "Checks of readiness-gate conditions, by condition type and status."}, []string{"condition", "status"})
	patches     = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_readiness_gate_patches_total", Help: "Condition changes written, by condition type."}, []string{"condition"})
)

// RegisterMetrics registers the controllers' metrics with reg, once.
func RegisterMetrics(reg prometheus.Registerer) {
	metricsOnce.Do(func() { reg.MustRegister(checks, patches) })
}

// Run runs the controller until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if c.Interval <= 0 {
		c.Interval = 5 * time.Second
	}
	if c.PendingInterval <= 0 {
		c.PendingInterval = 500 * time.Millisecond
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	factory := informers.NewSharedInformerFactory(c.Client, 10*time.Minute)
	podInformer := factory.Core().V1().Pods().Informer()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && HasGate(pod, c.ConditionType) {
			if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
				queue.Add(key)
			}
		}
	}
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced) {
		return ctx.Err()
	}
	klog.InfoS("Readiness gate controller running", "condition", c.ConditionType)
	var wg sync.WaitGroup
	for i := 0; i < c.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNext(ctx, queue, podInformer.GetStore()) {
			}
		}()
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) processNext(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], store cache.Store) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	obj, exists, _ := store.GetByKey(key)
	if !exists {
		queue.Forget(key)
		return true
	}
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil || !HasGate(pod, c.ConditionType) {
		queue.Forget(key)
		return true
	}
	r, err := c.sync(ctx, pod)
	if err != nil {
		klog.ErrorS(err, "Writing readiness gate condition", "pod", klog.KObj(pod), "condition", c.ConditionType)
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	// Checks may change without the pod changing.
	queue.AddAfter(key, NextCheck(r.Status, c.Interval, c.PendingInterval))
	return true
}

// NextCheck is when a pod is checked again after a check that gave status:
// a target that is not healthy yet soon (pending), a healthy one at the
// steady interval.
func NextCheck(status corev1.ConditionStatus, interval, pending time.Duration) time.Duration {
	if status == corev1.ConditionTrue {
		return interval
	}
	return min(pending, interval)
}

func (c *Controller) sync(ctx context.Context, pod *corev1.Pod) (Result, error) {
	r := c.Check(ctx, pod)
	checks.WithLabelValues(string(c.ConditionType), string(r.Status)).Inc()
	patch, err := ConditionPatch(pod, c.ConditionType, r, metav1.Now())
	if err != nil || patch == nil {
		return r, err
	}
	_, err = c.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return r, nil // gone, or replaced by a new pod of the same name
	}
	if err != nil {
		return r, fmt.Errorf("patching %s: %w", c.ConditionType, err)
	}
	patches.WithLabelValues(string(c.ConditionType)).Inc()
	klog.V(2).InfoS("Readiness gate condition changed", "pod", klog.KObj(pod), "condition", c.ConditionType, "status", r.Status, "reason", r.Reason)
	return r, nil
}
