package main

import (
	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/cleanup"
)

func newCleanupCommand() *cobra.Command {
	dataDir, bridge := ".steadyplane", "steadyplane0"
	var removeData bool
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Stop what an `up` killed with -9 left running, and unmount its files (as k3s-killall.sh)",
		Long: `Stop everything an "up" in --data-dir left behind when it could not stop in order (kill -9,
a crash, a power cut while the data directory was on a surviving disk): its processes
(etcd, the API server, the node agent, container monitors), every container the node agent
ran, every mount under the data directory (pod root filesystems, namespaces), and the
pods' bridge and kube-proxy's rules. The data stays unless --remove-data: the next "up" continues from it.`,
		Example: `  sudo steadyplane cleanup --data-dir .steadyplane
  sudo steadyplane cleanup --remove-data   # and rm -rf .steadyplane`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cleanup.Run(cmd.Context(), cleanup.Options{DataDir: dataDir, Bridge: bridge, RemoveData: removeData, Out: cmd.OutOrStdout()})
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", dataDir, "Data directory of the `up` to clean up after.")
	cmd.Flags().StringVar(&bridge, "cni-bridge", bridge, "The pods' bridge that `up` made (its --cni-bridge).")
	cmd.Flags().BoolVar(&removeData, "remove-data", false, "Also remove the data directory (the cluster's state, certificates and images).")
	return cmd
}
