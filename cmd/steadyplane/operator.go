package main

import (
	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
)

func newOperatorCommand() *cobra.Command {
	var kubeconfig, topology string
	c := operator.Command{Retry: operator.RetryPolicy{Base: fallback.DefaultRetryBase, Max: fallback.DefaultRetryMax}}
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
		Example: `  steadyplane operator --kubeconfig .steadyplane/credentials/kubeapiserver-operator/kubeconfig
  kubectl get kubeapiserver cluster -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{AltSvc: altsvcclient.Options{CacheDir: ""}})
			if err != nil {
				return err
			}
			c.Topology = operator.Topology(topology)
			return c.Run(ctx, cfg)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig of the operator's identity (steadyplane:kubeapiserver-operator).")
	fs.StringVar(&c.Identity, "identity", "", "This operator's name in the Lease steadyplane-system/kube-apiserver-operator; one per server (up gives the node's name, so that a restarted operator takes its lease back at once). Default: <hostname>_<random>.")
	fs.DurationVar(&c.Retry.Base, "retry-base", c.Retry.Base, "Wait before the first retry of a revision that failed with a retried reason; it doubles with every further fallback.")
	fs.DurationVar(&c.Retry.Max, "retry-max", c.Retry.Max, "Longest wait between retries.")
	fs.StringVar(&topology, "topology", string(operator.TopologyAuto), "Startup monitor and fallback on each node: auto (on), on, or off (a failing revision keeps failing on its node).")
	fs.IntVar(&c.Keep, "keep", 5, "Revisions kept besides the ones in use (current, target, last failed, last-known-good); 0 keeps all.")
	fs.StringVar(&c.MetricsAddress, "metrics-bind-address", "", "Address for Prometheus metrics (steadyplane_kubeapiserver_*); empty for none.")
	_ = cmd.MarkFlagRequired("kubeconfig")
	return cmd
}
