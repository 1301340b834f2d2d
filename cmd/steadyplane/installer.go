package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/pkg/fallback/installer"
)

func newInstallerCommand() *cobra.Command {
	const saDir = "/var/run/secrets/kubernetes.io/serviceaccount/"
	var (
		rev                                 revisionFlags
		nodeName, server, caFile, tokenFile string
		lastFailed, keep                    int
		withMonitor                         bool
		timeout                             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "installer",
		Short: "Install a revision of the API server's static pod on this node (run by the operator as a pod)",
		Long: `Read revision --revision from the API (ConfigMap steadyplane-system/kube-apiserver-pod-<N>,
its rendering for this node, kube-apiserver-pod-<N>-<node>, and the copies of the ConfigMaps
and Secrets it names), and, holding the installer lock
<data-dir>/locks/kube-apiserver-installer.lock, write:

  <data-dir>/static-pod-resources/kube-apiserver-pod-<N>/   manifest, configmaps/, secrets/ (0600)
  <data-dir>/manifests/kube-apiserver-startup-monitor.yaml  (with --startup-monitor)
  <data-dir>/manifests/kube-apiserver.yaml

each atomically (temporary file, fsync, rename, fsync of the directory), then prune
old revisions (never the current, the target, the last failed or last-known-good).
It authenticates with its pod's service account token.`,
		Example: `  steadyplane installer --data-dir /var/lib/steadyplane --revision 4 --node-name steadyplane \
    --server https://127.0.0.1:6443`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			if err := rev.check(); err != nil {
				return err
			}
			if server == "" || nodeName == "" {
				return fmt.Errorf("--server and --node-name are required")
			}
			cfg := &rest.Config{Host: server, BearerTokenFile: tokenFile, TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}, Timeout: 10 * time.Second}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", nodeName)
			fetchCtx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			log.Info("reading revision", "revision", rev.revision, "server", server)
			r, err := installer.Fetch(fetchCtx, client, int32(rev.revision), nodeName, withMonitor)
			if err != nil {
				return fmt.Errorf("reading revision %d: %w", rev.revision, err)
			}
			pruned, err := installer.Install(ctx, rev.layout(), r, installer.Options{Keep: keep, LastFailed: lastFailed, Log: log})
			if err != nil {
				return fmt.Errorf("installing revision %d: %w", rev.revision, err)
			}
			log.Info("revision installed", "revision", rev.revision, "startupMonitor", withMonitor, "pruned", pruned)
			return nil
		},
	}
	fs := cmd.Flags()
	rev.add(fs, "The revision to install.")
	fs.StringVar(&nodeName, "node-name", "", "This node: the revision's rendering for it is installed.")
	fs.IntVar(&lastFailed, "last-failed-revision", 0, "The node's last failed revision, kept on the node as the evidence; 0 for none.")
	fs.BoolVar(&withMonitor, "startup-monitor", true, "Install the revision's startup monitor too.")
	fs.IntVar(&keep, "keep", 5, "Revisions kept on the node besides the protected ones; 0 keeps all.")
	fs.StringVar(&server, "server", "", "The API server's URL.")
	fs.StringVar(&caFile, "certificate-authority", saDir+"ca.crt", "CA bundle of the API server.")
	fs.StringVar(&tokenFile, "token-file", saDir+"token", "Bearer token file (the pod's service account token).")
	fs.DurationVar(&timeout, "timeout", 2*time.Minute, "How long to try reading the revision.")
	_ = cmd.MarkFlagRequired("revision")
	return cmd
}
