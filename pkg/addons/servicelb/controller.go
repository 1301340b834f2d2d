package servicelb

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// ConditionType is the condition the controller keeps on the Services it
// manages: True with the nodes it is served on, False with why none.
const ConditionType = "steadyplane.io/LoadBalancer"

// Event reasons, besides a Decision's reasons for Warnings.
const (
	// EventAssigned: the Service's addresses changed.
	EventAssigned = "Assigned"
)

// Controller writes the load balancers Assign decides into the Services'
// status, with a condition and Events saying why.
type Controller struct {
	Client   kubernetes.Interface
	Recorder record.EventRecorder
	// Reserved are steadyplane's own ports on nodes' addresses.
	Reserved []Reserved
	// NodeSelector, when not nil, limits load balancers to these nodes.
	NodeSelector labels.Selector
	Metrics      *Metrics
}

// syncKey is the queue's one key: every pass decides every Service, as a
// port one Service frees can be the next one's.
const syncKey = "all"

// Run watches Services, Nodes, EndpointSlices and Pods and keeps the
// managed Services' status current until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(c.Client, 10*time.Minute)
	services := factory.Core().V1().Services()
	nodes := factory.Core().V1().Nodes()
	slices := factory.Discovery().V1().EndpointSlices()
	pods := factory.Core().V1().Pods()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "servicelb"})
	defer queue.ShutDown()
	enqueue := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { queue.Add(syncKey) },
		UpdateFunc: func(any, any) { queue.Add(syncKey) },
		DeleteFunc: func(any) { queue.Add(syncKey) },
	}
	var synced []cache.InformerSynced
	for _, inf := range []cache.SharedIndexInformer{services.Informer(), nodes.Informer(), slices.Informer(), pods.Informer()} {
		if _, err := inf.AddEventHandler(enqueue); err != nil {
			return err
		}
		synced = append(synced, inf.HasSynced)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	klog.InfoS("Service load balancers on node addresses", "class", ClassName, "reserved", len(c.Reserved))
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		key, quit := queue.Get()
		if quit {
			return nil
		}
		in := Input{Reserved: c.Reserved, NodeSelector: c.NodeSelector}
		var err error
		if in.Services, err = services.Lister().List(labels.Everything()); err == nil {
			if in.Nodes, err = nodes.Lister().List(labels.Everything()); err == nil {
				if in.EndpointSlices, err = slices.Lister().List(labels.Everything()); err == nil {
					in.Pods, err = pods.Lister().List(labels.Everything())
				}
			}
		}
		if err == nil {
			err = c.sync(ctx, in)
		}
		if err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Service load balancers: will try again")
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
}

// sync writes one pass's decisions: every managed Service whose status
// differs, and the Services no longer managed that still carry this
// controller's condition (their type changed) lose it and its addresses.
func (c *Controller) sync(ctx context.Context, in Input) error {
	decisions := Assign(in)
	c.Metrics.observe(decisions)
	var firstErr error
	for _, s := range in.Services {
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		d, managed := decisions[key]
		if !managed && meta.FindStatusCondition(s.Status.Conditions, ConditionType) == nil {
			continue
		}
		want := Status(s, d, managed)
		if equality.Semantic.DeepEqual(want, s.Status) {
			continue
		}
		updated := s.DeepCopy()
		updated.Status = want
		_, err := c.Client.CoreV1().Services(s.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		c.Metrics.updated(err)
		if err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			if apierrors.IsConflict(err) {
				// The cache is behind a write (ours, or the Service's
				// owner's): its event brings the next pass.
				continue
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("service %s: %w", key, err)
			}
			continue
		}
		c.record(s, d, managed)
	}
	return firstErr
}

// Status is the status a Service gets from its decision: its ingress
// addresses and this controller's condition; a Service the controller no
// longer manages gets neither.
func Status(s *corev1.Service, d Decision, managed bool) corev1.ServiceStatus {
	out := *s.Status.DeepCopy()
	if !managed {
		out.LoadBalancer.Ingress = nil
		meta.RemoveStatusCondition(&out.Conditions, ConditionType)
		return out
	}
	out.LoadBalancer.Ingress = d.Ingress
	status := metav1.ConditionFalse
	if d.Reason == ReasonAssigned {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&out.Conditions, metav1.Condition{Type: ConditionType, Status: status, Reason: d.Reason, Message: d.Message, ObservedGeneration: s.Generation})
	return out
}

// record says what changed, in an Event on the Service and a log line.
func (c *Controller) record(s *corev1.Service, d Decision, managed bool) {
	key := s.Namespace + "/" + s.Name
	if !managed {
		klog.InfoS("Service is no longer a load balancer of ours; addresses removed", "service", key)
		return
	}
	old := meta.FindStatusCondition(s.Status.Conditions, ConditionType)
	if old != nil && old.Message == d.Message && old.Reason == d.Reason {
		return
	}
	klog.InfoS("Service load balancer", "service", key, "reason", d.Reason, "message", d.Message)
	if c.Recorder == nil {
		return
	}
	if len(d.Nodes) > 0 {
		var ips []string
		for _, in := range d.Ingress {
			ips = append(ips, in.IP)
		}
		c.Recorder.Eventf(s, corev1.EventTypeNormal, EventAssigned, "load balancer at %v (%s)", ips, d.Message)
	}
	if len(d.Conflicts) > 0 {
		c.Recorder.Event(s, corev1.EventTypeWarning, ReasonPortConflict, joinConflicts(d.Conflicts))
	} else if d.Reason != ReasonAssigned {
		c.Recorder.Event(s, corev1.EventTypeWarning, d.Reason, d.Message)
	}
}

// Metrics are the controller's Prometheus metrics.
type Metrics struct {
	services  *prometheus.GaugeVec
	conflicts prometheus.Gauge
	updates   *prometheus.CounterVec
}

// NewMetrics registers the controller's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		services: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steadyplane_servicelb_services",
			Help: "LoadBalancer Services of the node-address load balancer, by the reason of their condition (Assigned, PortConflict, NoReadyNodes, NoLocalEndpoints)."}, []string{"reason"}),
		conflicts: prometheus.NewGauge(prometheus.GaugeOpts{Name: "steadyplane_servicelb_port_conflicts",
			Help: "Nodes left out of a LoadBalancer Service because one of its ports is taken there, summed over the Services."}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_servicelb_status_updates_total",
			Help: "Writes of a Service's load-balancer status, by result (ok; conflict: the cache was behind, done again at the next pass; error)."}, []string{"result"}),
	}
	reg.MustRegister(m.services, m.conflicts, m.updates)
	return m
}

func (m *Metrics) observe(decisions map[types.NamespacedName]Decision) {
	if m == nil {
		return
	}
	counts := map[string]int{ReasonAssigned: 0, ReasonPortConflict: 0, ReasonNoNodes: 0, ReasonNoLocalEndpoints: 0}
	conflicts := 0
	for _, d := range decisions {
		counts[d.Reason]++
		conflicts += len(d.Conflicts)
	}
	for r, n := range counts {
		m.services.WithLabelValues(r).Set(float64(n))
	}
	m.conflicts.Set(float64(conflicts))
}

func (m *Metrics) updated(err error) {
	if m == nil {
		return
	}
	result := "ok"
	switch {
	case apierrors.IsConflict(err):
		result = "conflict"
	case err != nil:
		result = "error"
	}
	m.updates.WithLabelValues(result).Inc()
}
