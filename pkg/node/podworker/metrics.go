package podworker

import "github.com/prometheus/client_golang/prometheus"

var (
	statusWrites = prometheus.NewCounter(prometheus.CounterOpts{Name: "steadyplane_node_pod_status_writes_total", Help: "Pod status PATCHes sent (no-op patches are not sent)."})
	// deleteRetries counts failed attempts to remove a terminated pod.
	deleteRetries = prometheus.NewCounter(prometheus.CounterOpts{Name: "steadyplane_node_pod_delete_retries_total", Help: "Failed attempts to remove a terminated pod from the API, each retried with backoff."})
	hookFailures  = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_node_lifecycle_hook_failures_total", Help: "Container lifecycle hooks that failed, by hook (postStart, preStop)."}, []string{"hook"})
)

// Collectors are the pod workers' metrics, for the node agent's registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{statusWrites, deleteRetries, hookFailures}
}
