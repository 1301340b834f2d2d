package main

import (
	"github.com/spf13/cobra"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kubeproxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// newControllerManagerCommand is upstream's kube-controller-manager, every
// flag as upstream documents it.
func newControllerManagerCommand() *cobra.Command {
	cmd := kcm.NewControllerManagerCommand()
	cmd.Use = "controller-manager"
	cmd.Short = "Run the Kubernetes controller manager (all kube-controller-manager flags)"
	return cmd
}

// newSchedulerCommand is upstream's kube-scheduler, every flag as upstream
// documents it.
func newSchedulerCommand() *cobra.Command {
	cmd := scheduler.NewSchedulerCommand()
	cmd.Use = "scheduler"
	cmd.Short = "Run the Kubernetes scheduler (all kube-scheduler flags)"
	return cmd
}

// newProxyCommand is upstream's kube-proxy, every flag as upstream
// documents it.
func newProxyCommand() *cobra.Command {
	cmd := kubeproxy.NewProxyCommand()
	// kube-proxy takes Go's global flags (for --boot-id-file and
	// --machine-id-file); CoreDNS's, in the same binary, are not its.
	for _, name := range []string{"conf", "dns.port", "p", "pidfile", "plugins", "quiet"} {
		_ = cmd.Flags().MarkHidden(name)
	}
	cmd.Use = "proxy"
	cmd.Short = "Run the Kubernetes network proxy on this node (all kube-proxy flags)"
	return cmd
}
