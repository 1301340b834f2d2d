package buildinfo

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Collector is steadyplane_build_info: a constant 1 labelled with the
// release, commit and Kubernetes version of this binary, as upstream's
// kubernetes_build_info is, so that a dashboard sees which release each
// process runs while an upgrade rolls.
func Collector() prometheus.Collector {
	info := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "steadyplane_build_info",
		Help: "A metric with a constant '1' value labelled by the steadyplane release, commit, Kubernetes version and Go version the process was built from.",
		ConstLabels: prometheus.Labels{
			"release": info.Release, "commit": info.Commit, "kubernetes_version": info.Kubernetes,
			"git_version": info.GitVersion, "go_version": info.Go,
		},
	})
	g.Set(1)
	return g
}

// RegisterProcessMetrics registers Collector with the two registries
// components of other projects serve from: component-base's legacy
// registry (kube-apiserver, controller manager, scheduler, kube-proxy) and
// Prometheus's default one (etcd). Registries of steadyplane's own
// components register Collector themselves.
func RegisterProcessMetrics() {
	legacyregistry.RawMustRegister(Collector())
	prometheus.MustRegister(Collector())
}
