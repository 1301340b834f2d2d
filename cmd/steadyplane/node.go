package main

import (
	goflag "flag"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/client/altsvc"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/node/agent"
)

func newNodeCommand() *cobra.Command {
	hostname, _ := os.Hostname()
	o := agent.Options{NodeName: hostname, NodeIP: "127.0.0.1", RootDir: "/var/lib/steadyplane/node", StopPodsOnExit: true}
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run a node agent: registers a Node and runs its pods as host processes",
		Long: `Run steadyplane's node agent. It registers a Node, renews its Lease, and runs the pods
bound to it (and static pods from --pod-manifest-path) with each container as a host
process: command and args run as given (the image is recorded, not pulled), with env,
workingDir and host networking. Probes, restart policy, crash-loop backoff and pod
conditions follow the kubelet; a pod is Ready when its containers are ready and every
readiness gate's condition is True (Pod Ready++).

Static pods from --pod-manifest-path start at once, with no API server needed. The Node
is registered once an API server answers (retried with backoff), and mirror pods follow.

Container logs: <root-dir>/pods/<namespace>_<name>_<uid>/<container>/<restart>.log.
With --stop-pods-on-exit (the default) containers stop with the agent: SIGTERM, then
SIGKILL after the pod's grace period, and die with it if it crashes. Without it they keep
running; the next agent stops each one it finds (pid file with the process start time, so
a reused pid is never hit) and starts it again, once: never two copies.`,
		Example: `  steadyplane node --kubeconfig node.kubeconfig --node-name n1 --node-ip 127.0.0.1 \
    --root-dir /tmp/n1 --pod-manifest-path /tmp/n1/manifests`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			// Both client options: fail over between API servers, wait out
			// one that is initializing.
			cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{AltSvc: altsvc.Options{CacheDir: filepath.Join(o.RootDir, "alternative-services")}})
			if err != nil {
				return err
			}
			a, err := agent.New(cfg, o)
			if err != nil {
				return err
			}
			return a.Run(ctx)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", kubeconfig, "Kubeconfig with the node's credentials (system:node:<node-name>, group system:nodes).")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of the Node.")
	fs.StringVar(&o.NodeIP, "node-ip", o.NodeIP, "Address of the Node, and of every pod (host network); probes dial it.")
	fs.StringVar(&o.RootDir, "root-dir", o.RootDir, "Directory for pod directories and container logs.")
	fs.StringVar(&o.PodManifestPath, "pod-manifest-path", o.PodManifestPath, "Directory of static pod manifests (YAML or JSON), watched for changes; empty for none.")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "Address for Prometheus /metrics and /healthz, e.g. 127.0.0.1:10255; empty for none.")
	fs.BoolVar(&o.StopPodsOnExit, "stop-pods-on-exit", o.StopPodsOnExit, "Stop every container when the agent stops, and with it if it crashes; false leaves them running until the next agent replaces them.")
	fs.DurationVar(&o.StatusInterval, "node-status-update-frequency", o.StatusInterval, "How often the Node's Ready heartbeat is written (default 10s).")
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlag(klogFlags.Lookup("v"))
	_ = cmd.MarkFlagRequired("kubeconfig")
	return cmd
}
