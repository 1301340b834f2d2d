package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
	"github.com/steadyplane/steadyplane/pkg/leader"
	"github.com/steadyplane/steadyplane/pkg/metricsserver"
)

func newOperatorCommand() *cobra.Command {
	var (
		kubeconfig, metricsAddress, topology string
		identity                             string
		retry                                = operator.RetryPolicy{Base: fallback.DefaultRetryBase, Max: fallback.DefaultRetryMax}
		keep                                 int
	)
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Roll out the API server's configuration (KubeAPIServer cluster) as revisions, with fallback and retries",
		Long: `Reconcile the KubeAPIServer object "cluster" (operator.steadyplane.io/v1alpha1):

- every change of its spec (extraArgs, configMaps, secrets in steadyplane-system) makes
  a new revision: ConfigMap steadyplane-system/kube-apiserver-pod-<N> with the spec, and
  immutable copies <name>-<N> of the ConfigMaps and Secrets;
- a revision is rendered for each control-plane node from that node's templates
  (ConfigMap kube-apiserver-templates-<node>) as kube-apiserver-pod-<N>-<node>; a
  change of a node's templates makes a new revision too;
- the newest revision is installed on one control-plane node at a time by an installer
  pod, with a startup monitor deciding for that node (unless --topology=off); a revision
  that falls back on a node stops the rollout there;
- one operator runs on every server; the one holding the Lease
  steadyplane-system/kube-apiserver-operator acts;
- a fallback the startup monitor made (the annotations on the API server's mirror pod)
  is recorded in status.nodeStatuses and the Degraded condition, with an Event; the
  revision is retried as a new one after --retry-base, doubling up to --retry-max,
  unless its reason is NeverStartedUp or CrashLooping, which wait for a new spec.`,
		Example: `  steadyplane operator --kubeconfig .steadyplane/kubeapiserver-operator.kubeconfig
  kubectl get kubeapiserver cluster -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			t := operator.Topology(topology)
			if t != operator.TopologyAuto && t != operator.TopologyOn && t != operator.TopologyOff {
				return fmt.Errorf("--topology=%q: auto, on or off", topology)
			}
			if retry.Base <= 0 || retry.Max < retry.Base {
				return fmt.Errorf("--retry-base=%v --retry-max=%v: need 0 < base <= max", retry.Base, retry.Max)
			}
			cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{AltSvc: altsvcclient.Options{CacheDir: ""}})
			if err != nil {
				return err
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
			// default spam filter (25, then one per 5 minutes per object)
			// would drop the story of a busy hour's rollouts.
			broadcaster := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{BurstSize: 100, QPS: 0.1}))
			broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
			defer broadcaster.Shutdown()
			reg := prometheus.NewRegistry()
			errs := make(chan error, 1)
			if metricsAddress != "" {
				go func() {
					if err := metricsserver.Serve(ctx, metricsAddress, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})); err != nil {
						errs <- err
					}
				}()
			}
			o := &operator.Operator{
				Client: client, API: v1alpha1.Client{Dynamic: dyn},
				Recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubeapiserver-operator"}),
				Clock:    clock.RealClock{}, Retry: retry, Topology: t, Keep: keep,
				Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), Metrics: operator.NewMetrics(reg),
			}
			if identity == "" {
				host, _ := os.Hostname()
				identity = host + "_" + string(uuid.NewUUID())
			}
			lock, err := resourcelock.New(resourcelock.LeasesResourceLock, v1alpha1.Namespace, operator.LeaseName, client.CoreV1(), client.CoordinationV1(),
				resourcelock.ResourceLockConfig{Identity: identity})
			if err != nil {
				return err
			}
			return leader.Run(ctx, lock, o.Log, o.Run, errs)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig of the operator's identity (steadyplane:kubeapiserver-operator).")
	fs.StringVar(&identity, "identity", "", "This operator's name in the Lease steadyplane-system/kube-apiserver-operator; one per server (up gives the node's name, so that a restarted operator takes its lease back at once). Default: <hostname>_<random>.")
	fs.DurationVar(&retry.Base, "retry-base", retry.Base, "Wait before the first retry of a revision that failed with a retried reason; it doubles with every further fallback.")
	fs.DurationVar(&retry.Max, "retry-max", retry.Max, "Longest wait between retries.")
	fs.StringVar(&topology, "topology", string(operator.TopologyAuto), "Startup monitor and fallback on each node: auto (on), on, or off (a failing revision keeps failing on its node).")
	fs.IntVar(&keep, "keep", 5, "Revisions kept besides the ones in use (current, target, last failed, last-known-good); 0 keeps all.")
	fs.StringVar(&metricsAddress, "metrics-bind-address", "", "Address for Prometheus metrics (steadyplane_kubeapiserver_*); empty for none.")
	_ = cmd.MarkFlagRequired("kubeconfig")
	return cmd
}
