package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/apiserver"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "steadyplane",
		Short: "A Kubernetes control plane that stays up",
		Long: `steadyplane runs the real kube-apiserver on an embedded etcd and adds availability
mechanisms: retry during server initialization (KEP-3028), Alt-Svc for client-side
HA across API servers (KEP-3037), a node agent with Pod Ready++ readiness gates,
and more to come.

Start a single-node control plane in ./.steadyplane with:

  steadyplane up`,
		SilenceUsage: true,
	}
	root.AddCommand(
		newUpCommand(),
		newEtcdCommand(),
		apiserver.NewCommand(),
		newControllerManagerCommand(),
		newSchedulerCommand(),
		newProxyCommand(),
		newDNSCommand(),
		newMetricsServerCommand(),
		newCertsCommand(),
		newTokenCommand(),
		newEtcdSnapshotCommand(),
		newNodeCommand(),
		newContainerExitedCommand(),
		newReadinessControllerCommand(),
		newAddonControllersCommand(),
		newStartupMonitorCommand(),
		newOperatorCommand(),
		newInstallerCommand(),
		newKubectlCommand(),
		newImagesCommand(),
		newCleanupCommand(),
		newRemoveNodeCommand(),
		newVersionCommand(),
		newUpgradeCommand(),
	)
	return root
}

// signalContext returns the command's context, ended by Ctrl-C or SIGTERM so
// that the command can shut down in order.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}
