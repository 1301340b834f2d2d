package operator

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/steadyplane/steadyplane/pkg/buildinfo"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/leader"
	"github.com/steadyplane/steadyplane/pkg/metricsserver"
)

// Command is the operator as "steadyplane operator" runs it: one per
// server, the one holding the Lease steadyplane-system/kube-apiserver-operator
// acting.
type Command struct {
	// Identity is its name in the Lease; "" for <hostname>_<random>.
	Identity string
	// Retry, Topology and Keep are the Operator's.
	Retry    RetryPolicy
	Topology Topology
	Keep     int
	// MetricsAddress serves Prometheus metrics; "" for none.
	MetricsAddress string
}

// Run checks c and runs the operator with the client configuration cfg
// while it holds the Lease, until ctx ends.
func (c Command) Run(ctx context.Context, cfg *rest.Config) error {
	if c.Topology != TopologyAuto && c.Topology != TopologyOn && c.Topology != TopologyOff {
		return fmt.Errorf("--topology=%q: auto, on or off", c.Topology)
	}
	if c.Retry.Base <= 0 || c.Retry.Max < c.Retry.Base {
		return fmt.Errorf("--retry-base=%v --retry-max=%v: need 0 < base <= max", c.Retry.Base, c.Retry.Max)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// Every event of the operator is about the one KubeAPIServer; the
	// default spam filter (25, then one per 5 minutes per object) would
	// drop the story of a busy hour's rollouts.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{BurstSize: 100, QPS: 0.1}))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildinfo.Collector())
	errs := make(chan error, 1)
	metricsserver.Start(ctx, c.MetricsAddress, reg, errs)
	o := &Operator{
		Client: client, API: v1alpha1.Client{Dynamic: dyn},
		Recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubeapiserver-operator"}),
		Clock:    clock.RealClock{}, Retry: c.Retry, Topology: c.Topology, Keep: c.Keep,
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), Metrics: NewMetrics(reg),
	}
	identity := c.Identity
	if identity == "" {
		host, _ := os.Hostname()
		identity = host + "_" + string(uuid.NewUUID())
	}
	lock, err := leader.Lease(client, v1alpha1.Namespace, LeaseName, identity)
	if err != nil {
		return err
	}
	return leader.Run(ctx, lock, o.Log, o.Run, errs)
}
