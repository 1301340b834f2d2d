package ifreadyfilter

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	initializedGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "steadyplane",
		Subsystem:      "apiserver",
		Name:           "initialized",
		Help:           "1 once a full /readyz has answered 200 for the first time, 0 before.",
		StabilityLevel: metrics.ALPHA,
	})
	initializationSeconds = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "steadyplane",
		Subsystem:      "apiserver",
		Name:           "initialization_duration_seconds",
		Help:           "Seconds from the start of the server until the first full /readyz answered 200.",
		StabilityLevel: metrics.ALPHA,
	})
	rejectedRequests = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "steadyplane",
		Subsystem:      "ifready",
		Name:           "rejected_requests_total",
		Help:           "Requests carrying X-Kubernetes-If-Ready answered 503 with Retry-After because the server had not yet initialized.",
		StabilityLevel: metrics.ALPHA,
	})

	registerOnce sync.Once
)

// RegisterMetrics registers the filter's metrics with component-base's legacy
// registry, which the API server serves on /metrics. It is safe to call more
// than once. Until it is called the metrics record nothing.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(initializedGauge, initializationSeconds, rejectedRequests)
	})
}
