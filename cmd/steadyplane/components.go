package main

import (
	"github.com/spf13/cobra"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
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
