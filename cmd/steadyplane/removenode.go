package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/join"
)

func newRemoveNodeCommand() *cobra.Command {
	dataDir := ".steadyplane"
	cmd := &cobra.Command{
		Use:   "remove-node NAME",
		Short: "Take a server or worker out of the cluster: its etcd member, its API server's endpoint and its Node",
		Long: `Take the node NAME out of the cluster, run on any server with its --data-dir: its etcd
member is removed (refused when the members left would not keep a quorum), its API server
leaves the kubernetes Endpoints (clients stop using it), and its Node is deleted.

Stop "up" (or "node") on that host first. Its data directory cannot start again; to join
it once more, run "steadyplane cleanup --remove-data" there, then "up --server ... --token-file".`,
		Example: `  steadyplane remove-node s3 --data-dir .steadyplane`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			out := cmd.OutOrStdout()
			return join.RemoveNode(ctx, dataDir, args[0], func(f string, a ...any) { fmt.Fprintf(out, f+"\n", a...) })
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", dataDir, "Data directory of a server of the cluster (its admin kubeconfig and etcd client certificate are used).")
	return cmd
}
