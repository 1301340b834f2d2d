package altsvcfilter

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	advertisedServers = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "steadyplane",
		Subsystem:      "apiserver",
		Name:           "alternative_services",
		Help:           "API servers listed in the Alt-Svc header sent to authenticated HTTP/2 clients; 0 while fewer than two are live.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

// RegisterMetrics registers the filter's metrics with component-base's legacy
// registry, which the API server serves on /metrics. It is safe to call more
// than once.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(advertisedServers) })
}
