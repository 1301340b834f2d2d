package operator

import (
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
	reg.MustRegister(m.fallbacks, m.revisions, m.latest, m.degraded, m.current)
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
