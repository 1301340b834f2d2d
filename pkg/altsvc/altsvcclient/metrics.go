package altsvcclient

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are process-wide, like client-go's own: every pool adds to them.
var metrics = struct {
	requests *prometheus.CounterVec
	switches prometheus.Counter
	blocks   *prometheus.CounterVec
	blocked  prometheus.Gauge
	resumes  prometheus.Counter
	hedges   *prometheus.CounterVec
	checks   *prometheus.CounterVec
	unknowns *prometheus.CounterVec
}{
	requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steadyplane_client_alternative_services_requests_total",
		Help: "Requests sent by the alternative-services round tripper, by API server and result (ok, network, certificate, canceled, not the host's fault; hedge-lost: a read another server answered first).",
	}, []string{"host", "result"}),
	switches: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "steadyplane_client_alternative_services_switches_total",
		Help: "Times a client moved to another API server.",
	}),
	blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steadyplane_client_alternative_services_blocks_total",
		Help: "Times an API server was blocked, by failure (network: for a while; certificate: for good).",
	}, []string{"failure"}),
	blocked: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "steadyplane_client_alternative_services_blocked_hosts",
		Help: "API servers blocked at the last failure of the most recent pool.",
	}),
	resumes: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "steadyplane_client_alternative_services_watch_resumes_total",
		Help: "Watches whose stream broke and that went on on another API server from their last event.",
	}),
	hedges: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steadyplane_client_alternative_services_hedges_total",
		Help: "Reads without an answer after the hedge delay, by what followed (sent: also sent to the next API server; over-budget: not sent, the pool's budget of hedges was spent).",
	}, []string{"outcome"}),
	checks: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steadyplane_client_alternative_services_stall_checks_total",
		Help: "Checks of an API server that a request (a write) waited on past the stall-check delay, by result (answered: the check's read was answered, the request waits on; gone: no answer, the request was ended and the server blocked).",
	}, []string{"result"}),
	unknowns: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steadyplane_client_alternative_services_unknown_outcomes_total",
		Help: "Writes whose answer was lost after they reached an API server, by what followed (reported: the caller got an outcome-unknown error; passed-through: the caller got the connection's own error, which client-go's retry reads (EOF, reset, lost HTTP/2 connection); settled: a write that takes effect at most once was sent again and its answer settled it).",
	}, []string{"result"}),
}

// RegisterMetrics registers the round tripper's metrics with reg (for
// example prometheus.DefaultRegisterer, or a controller-runtime registry).
func RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{metrics.requests, metrics.switches, metrics.blocks, metrics.blocked, metrics.resumes, metrics.hedges, metrics.checks, metrics.unknowns} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return err
			}
		}
	}
	return nil
}
