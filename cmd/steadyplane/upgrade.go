package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/fallback/release"
)

func newUpgradeCommand() *cobra.Command {
	o := release.UpgradeOptions{DataDir: ".steadyplane", Wait: 5 * time.Minute}
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Move this server, or every node of its cluster one at a time, to another steadyplane release; pods keep running",
		Long: `Move the server of a data directory to another steadyplane binary (--binary) or back to
the one before (--rollback). Before anything changes it runs the binary's version, and reads
the cluster's Nodes to refuse what upstream's version-skew policy forbids (a skipped minor,
a node agent newer than the servers). It then keeps the binary in the data directory by its
content.

On a single server it asks up to hand over: the control plane stops, the workloads keep
running, and up continues as the new binary, which adopts the pods (same containers,
restart counts, readiness). The API server moves as a revision its startup monitor watches.
If the new release cannot start, up hands back to the previous one by itself; if it dies,
the next start of up (a service manager's, or by hand) runs the previous one.

In a cluster (more than one Node) it sets the release (version and digest) on the
KubeAPIServer "cluster", and the operator rolls it: the servers one at a time, each only
once the one before is healthy on it, then the workers, whose node agents hand over in
place. Every node fetches the binary from another over the node API, checked by its digest.
A node that cannot start the release goes back by itself and the rollout stops there
(Degraded names the node and the reason); a fixed release rolls on.

From a machine that is no server, --kubeconfig (an admin's, which may use nodes/proxy)
takes the place of --data-dir: the binary is handed to every server through the API
server's node proxy, and the operator rolls it, on one node as on many.

It waits for the end and prints each step (--wait 0 does not wait).`,
		Example: `  sudo steadyplane upgrade --binary ./steadyplane-next
  sudo steadyplane upgrade --rollback --data-dir /var/lib/steadyplane
  steadyplane upgrade --kubeconfig ~/admin.kubeconfig --binary ./steadyplane-next`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			if o.Kubeconfig != "" && cmd.Flags().Changed("data-dir") {
				return errors.New("--data-dir and --kubeconfig: give one (a server's data directory, or a kubeconfig from anywhere)")
			}
			o.Out = cmd.OutOrStdout()
			return release.Upgrade(ctx, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "The server's data directory (up's --data-dir).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Reach the cluster with this kubeconfig instead of a server's data directory (the binary is handed to the servers).")
	fs.StringVar(&o.Binary, "binary", o.Binary, "The steadyplane binary to move to.")
	fs.BoolVar(&o.Rollback, "rollback", o.Rollback, "Move back to the binary the server ran before the current one.")
	fs.DurationVar(&o.Wait, "wait", o.Wait, "How long to wait for the move to end; 0 asks for it and returns.")
	return cmd
}
