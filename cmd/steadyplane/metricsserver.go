package main

import (
	"slices"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/addons/metricsapi"
)

// newMetricsServerCommand is metrics-server (sigs.k8s.io/metrics-server)
// with its own flags, as its project documents them.
func newMetricsServerCommand() *cobra.Command {
	srv := metricsapi.NewServer()
	cmd := &cobra.Command{
		Use:   "metrics-server [flags]",
		Short: "Run metrics-server, the cluster's resource metrics API (metrics.k8s.io, for kubectl top and autoscaling)",
		Long: `Run metrics-server, which scrapes every node agent's /metrics/resource and serves
metrics.k8s.io through the API servers' aggregation layer. "up" runs it as the
Deployment kube-system/metrics-server, from an image of this binary, registered as
the APIService v1beta1.metrics.k8s.io. Its flags are metrics-server's own:`,
		Example:            `  steadyplane metrics-server --kubeconfig=/etc/metrics-server/config/kubeconfig --metric-resolution=15s`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" }) {
				if err := cmd.Help(); err != nil {
					return err
				}
				srv.PrintFlags(cmd.OutOrStdout())
				return nil
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			return srv.Run(ctx, args)
		},
	}
	return cmd
}
