package operator

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
)

// Metrics are the operator's Prometheus metrics.
type Metrics struct {
	fallbacks *prometheus.CounterVec
	revisions *prometheus.CounterVec
	latest    prometheus.Gauge
	degraded  prometheus.Gauge
	current   *prometheus.GaugeVec

	releaseFallbacks *prometheus.CounterVec
	releaseDuration  prometheus.Histogram
	releaseDegraded  prometheus.Gauge
	releaseNodes     *prometheus.GaugeVec
}

// NewMetrics registers the operator's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_kubeapiserver_fallbacks_total",
			Help: "Fallbacks of a node from a failed revision seen by the operator, by the startup monitor's reason."}, []string{"reason"}),
		revisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_kubeapiserver_revisions_total",
			Help: "Revisions the operator created, by reason (RevisionCreated for a changed spec, RevisionRetry for a retry)."}, []string{"reason"}),
		latest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "steadyplane_kubeapiserver_latest_revision", Help: "The latest available revision."}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "steadyplane_kubeapiserver_degraded",
			Help: "1 while the Degraded condition is True (a node fell back from the latest revision)."}),
		current: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steadyplane_kubeapiserver_node_current_revision",
			Help: "The revision each control-plane node runs."}, []string{"node"}),
	}
	m.releaseFallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_release_fallbacks_total",
		Help: "Nodes that could not start a release and went back to the one they ran, by reason."}, []string{"reason"})
	m.releaseDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "steadyplane_release_rollout_duration_seconds",
		Help: "From the first node asked to move to a release until every node runs it.", Buckets: prometheus.ExponentialBuckets(10, 2, 10)})
	m.releaseDegraded = prometheus.NewGauge(prometheus.GaugeOpts{Name: "steadyplane_release_degraded",
		Help: "1 while the release rollout is Degraded (it failed on a node and stopped there)."})
	m.releaseNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "steadyplane_release_nodes",
		Help: "Nodes by whether they run the release rolled (on_target true or false)."}, []string{"on_target"})
	reg.MustRegister(m.fallbacks, m.revisions, m.latest, m.degraded, m.current, m.releaseFallbacks, m.releaseDuration, m.releaseDegraded, m.releaseNodes)
	return m
}

func (m *Metrics) fallback(reason string) {
	if m != nil {
		m.fallbacks.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) revision(reason string) {
	if m != nil {
		m.revisions.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) observe(st v1alpha1.KubeAPIServerStatus) {
	if m == nil {
		return
	}
	m.latest.Set(float64(st.LatestAvailableRevision))
	m.degraded.Set(0)
	if meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionDegraded) {
		m.degraded.Set(1)
	}
	for _, ns := range st.NodeStatuses {
		m.current.WithLabelValues(ns.NodeName).Set(float64(ns.CurrentRevision))
	}
}

func (m *Metrics) releaseFallback(reason string) {
	if m != nil {
		m.releaseFallbacks.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) releaseRolledOut(took time.Duration) {
	if m != nil {
		m.releaseDuration.Observe(took.Seconds())
	}
}

func (m *Metrics) observeRelease(rs *v1alpha1.ReleaseStatus) {
	if m == nil {
		return
	}
	m.releaseDegraded.Set(0)
	if meta.IsStatusConditionTrue(rs.Conditions, v1alpha1.ConditionDegraded) {
		m.releaseDegraded.Set(1)
	}
	on := 0
	for _, n := range rs.Nodes {
		if n.Release == rs.Release.String() {
			on++
		}
	}
	m.releaseNodes.WithLabelValues("true").Set(float64(on))
	m.releaseNodes.WithLabelValues("false").Set(float64(len(rs.Nodes) - on))
}
