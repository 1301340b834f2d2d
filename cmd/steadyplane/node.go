package main

import (
	goflag "flag"
	"fmt"
	"maps"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/addons/kubeproxy"
	"github.com/steadyplane/steadyplane/pkg/node"
	"github.com/steadyplane/steadyplane/pkg/node/agent"
	"github.com/steadyplane/steadyplane/pkg/node/podnet"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
)

func newContainerExitedCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "container-exited",
		Short:              "Record the end of a runc container for the node agent (run by conmon)",
		Long:               runc.ExitHookUsage,
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
				fmt.Println(runc.ExitHookUsage)
				return nil
			}
			os.Exit(runc.ExitHookMain(args))
			return nil
		},
	}
}

func newNodeCommand() *cobra.Command {
	hostname, _ := os.Hostname()
	c := node.Config{
		// A worker runs pods as a server's agent does (up's flags): a
		// seccomp filter by default and a PID limit.
		Agent: agent.Options{NodeName: hostname, NodeIP: "127.0.0.1", RootDir: "/var/lib/steadyplane/node", StopPodsOnExit: true, ResolverConfig: "/etc/resolv.conf",
			SeccompDefault: true, PodPidsLimit: agent.DefaultPodPidsLimit},
		Runtime: "auto", Network: podnet.Config{PodCIDR: "10.244.0.0/24", Bridge: "steadyplane0"}, LogMaxFiles: crilog.DefaultMaxFiles,
		EvictionHard: maps.Clone(agent.DefaultEvictionHard), APIPort: 10250, Proxy: true, ProxyMode: kubeproxy.ModeAuto,
	}
	o := &c.Agent
	logMaxSize := resource.MustParse("10Mi")
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run a node agent: registers a Node and runs its pods from their images under runc, with their own network",
		Long: `Run steadyplane's node agent. It registers a Node, renews its Lease, and runs the pods
bound to it (and static pods from --pod-manifest-path). Probes, restart policy, crash-loop
backoff and pod conditions follow the kubelet; a pod is Ready when its containers are ready
and every readiness gate's condition is True (Pod Ready++).

With --runtime=runc (auto picks it when the agent is root and runc is installed) each
container runs under runc with its image as its root filesystem: pulled by imagePullPolicy
with the pod's imagePullSecrets (plain HTTP only to loopback registries and
--insecure-registry), or imported from archives (steadyplane images import, or
--image-import-dir at start); layers unpacked once into --image-store and stacked by
overlayfs under a writable layer of the container's own. Its own mount and PID namespaces,
the pod's network, IPC and UTS namespaces; the image's user and runAsUser/Group,
runAsNonRoot, readOnlyRootFilesystem, privileged, capabilities; memory and cpu limits (over
its memory limit a container ends OOMKilled); hostPath, emptyDir, configMap, secret,
downwardAPI and projected volumes. Pods of RuntimeClass steadyplane-host run their command
from the host's system directories (/usr, /etc, /lib*, /bin, /sbin, /opt, read-only)
instead of an image: the control plane's static pods. Each non-hostNetwork pod gets an
address from --pod-cidr through the CNI plugins (bridge, host-local, portmap, loopback in
/usr/lib/cni). Containers outlive an agent crash and a restarted agent adopts them: no
restart, same addresses.

With --runtime=process containers are host processes: no isolation, the host's network,
no volumes; every pod gets a NotIsolated event.

Static pods from --pod-manifest-path start at once, with no API server needed. The Node
is registered once an API server answers (retried with backoff), and mirror pods follow.

The node API on --node-ip:--port (10250) serves what the kubelet's does for kubectl
through the API server: container logs (follow, tail, timestamps, previous, since), exec
(with a terminal for -it), attach (output only) and port-forward into the pod's network
namespace; callers authenticate by client certificate or token and are authorized by
SubjectAccessReview, as with the kubelet.

The agent keeps its own record of each pod in <root-dir>/pods/<pod>/status.json (start
attempts, restarts, last exit code, reason and termination message), which a restarted
agent continues from, served read-only on --metrics-bind-address (loopback only) at
/pods and /localstatus/pods for the static pods (the others' are for the node API's
authenticated callers): the truth while no API server answers.

Container logs: <root-dir>/pods/<namespace>_<name>_<uid>/<container>/<restart>.log.
With --stop-pods-on-exit (the default) containers stop with the agent: SIGTERM, then
SIGKILL after the pod's grace period, and die with it if it crashes. Without it they keep
running; the next agent stops each one it finds (pid file with the process start time, so
a reused pid is never hit) and starts it again, once: never two copies.`,
		Example: `  steadyplane node --kubeconfig node.kubeconfig --node-name n1 --node-ip 127.0.0.1 \
    --root-dir /tmp/n1 --pod-manifest-path /tmp/n1/manifests

  # a worker of a cluster up made, with a copy of a server's <data-dir>/token
  steadyplane node --server https://10.0.0.1:6443 --token-file token --node-ip 10.0.0.4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			c.LogMaxSize, c.Out = logMaxSize.Value(), cmd.OutOrStdout()
			return node.Run(ctx, c)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "Kubeconfig with the node's credentials (system:node:<node-name>, group system:nodes).")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of the Node.")
	fs.StringVar(&o.NodeIP, "node-ip", o.NodeIP, "Address of the Node, and of hostNetwork pods.")
	fs.StringVar(&c.Runtime, "runtime", c.Runtime, "Container runtime: runc (isolated; needs root and runc), process (host processes, not isolated), or auto (runc when possible, else process with a warning).")
	fs.StringVar(&c.Network.PodCIDR, "pod-cidr", c.Network.PodCIDR, "Range of pod addresses on this node (until the Node's spec.podCIDR is allocated); must overlap no route of the host.")
	fs.StringVar(&c.Network.Bridge, "cni-bridge", c.Network.Bridge, "Host bridge the pods' interfaces join.")
	fs.StringVar(&o.RootDir, "root-dir", o.RootDir, "Directory for pod directories and container logs.")
	fs.StringVar(&o.PodManifestPath, "pod-manifest-path", o.PodManifestPath, "Directory of static pod manifests (YAML or JSON), watched for changes; empty for none.")
	fs.IntVar(&c.APIPort, "port", c.APIPort, "Port of the node API on --node-ip (logs, exec, attach, port-forward for the API server), as the kubelet's; 0 for none.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "Serving certificate of the node API, signed by the cluster CA for --node-ip.")
	fs.StringVar(&o.TLSKeyFile, "tls-private-key-file", o.TLSKeyFile, "Key of --tls-cert-file.")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA that signs the client certificates of the node API's callers (the API server's --kubelet-client-certificate); other callers use bearer tokens (TokenReview). Every request is authorized by SubjectAccessReview on the Node's subresources (nodes/proxy, nodes/log, nodes/metrics, ...).")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "Loopback address of the read-only endpoint (no authentication, as the kubelet's read-only port): /metrics, /healthz, and /pods and /localstatus/pods (start attempts, restarts, last exits) of the static pods, e.g. 127.0.0.1:10255; empty for none.")
	fs.BoolVar(&o.StopPodsOnExit, "stop-pods-on-exit", o.StopPodsOnExit, "Stop every container when the agent stops, and with it if it crashes; false leaves them running until the next agent replaces them.")
	fs.StringVar(&c.ImageStore, "image-store", "", "Directory of the node's image store (default <root-dir>/image-store): pulled and imported images, each layer unpacked once.")
	fs.StringVar(&c.ImageImportDir, "image-import-dir", "", "Directory whose image archives (docker save or OCI, *.tar, *.tar.gz) are imported at start; empty for none. `up` uses <data-dir>/images.")
	fs.Var(&quantityFlag{&logMaxSize}, "container-log-max-size", "Size at which a container's log is rotated, as the kubelet's (e.g. 10Mi).")
	fs.IntVar(&c.LogMaxFiles, "container-log-max-files", c.LogMaxFiles, "Log files kept per container run, the current one included, as the kubelet's.")
	fs.Int64Var(&o.PodPidsLimit, "pod-max-pids", o.PodPidsLimit, "Most processes and threads each container may have (cgroup pids.max), as the kubelet's --pod-max-pids; 0 for no limit. The same on servers (up) and workers.")
	fs.BoolVar(&o.SeccompDefault, "seccomp-default", o.SeccompDefault, "Give containers that name no seccomp profile RuntimeDefault (Docker's and containerd's default filter) instead of Unconfined, as the kubelet's flag (on by default, on servers and workers alike; --seccomp-default=false for Unconfined). Localhost profiles are read from <root-dir>/seccomp.")
	fs.StringVar(&c.RegistriesFile, "registries-config", "", "The node's registries file, as k3s's registries.yaml: mirrors tried before a registry (an http:// endpoint allows plain HTTP to it), and per registry host a login (auth) and a CA (tls.ca_file); insecure_skip_verify is refused. A file that does not exist is none. `up` uses <data-dir>/registries.yaml.")
	fs.StringSliceVar(&o.InsecureRegistries, "insecure-registry", nil, "Registry (host or host:port) that may be pulled from over plain HTTP; registries on loopback addresses always may. Repeatable.")
	fs.DurationVar(&o.StatusInterval, "node-status-update-frequency", o.StatusInterval, "How often the Node's Ready heartbeat is written (default 10s).")
	fs.Var(cliflag.NewLangleSeparatedMapStringString(&c.EvictionHard), "eviction-hard", "Hard eviction thresholds, as the kubelet's (e.g. memory.available<100Mi,nodefs.available<10%): below one the Node reports MemoryPressure, DiskPressure or PIDPressure and the agent evicts a pod every 10s, BestEffort and pods over their requests first, never static or critical pods. Signals: memory.available, nodefs.available, imagefs.available, pid.available; a value of 0% or 100% turns one off, as the kubelet's; giving the flag replaces every default.")
	fs.IPSliceVar(&o.ClusterDNS, "cluster-dns", nil, "The cluster's DNS servers (comma-separated), as the kubelet's: ClusterFirst pods resolve with them; without, ClusterFirst falls back to Default with a MissingClusterDNS event. `up` gives the kube-dns Service's address.")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", "", "The cluster's DNS domain (e.g. cluster.local), as the kubelet's: ClusterFirst pods search <namespace>.svc.<domain>, svc.<domain> and <domain>, and a pod with a subdomain is <hostname>.<subdomain>.<namespace>.svc.<domain>.")
	fs.StringVar(&o.LocalStoragePath, "local-storage-path", "", "Directory of the node's local volumes (the local-path StorageClasses', made and removed by the add-on controllers through the node API, authorized as nodes/volumes); default <root-dir>/storage. Their data stays across restarts of the agent and of up.")
	fs.StringVar(&o.ResolverConfig, "resolv-conf", o.ResolverConfig, "The node's resolver file, as the kubelet's: Default pods get its servers and search path, and ClusterFirst pods' search path extends with its; empty for none.")
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlag(klogFlags.Lookup("v"))
	fs.StringVar(&c.Server, "server", "", "Join the cluster of this API server (https://host:port) as a worker: the node asks for its client and serving certificates (TLS bootstrapping, kept in <root-dir>/bootstrap) with --token or --token-file, instead of --kubeconfig and --tls-*; its pods get the range the controller manager allocates to its Node; it runs kube-proxy as a static pod (--proxy) and takes the cluster DNS's address and domain from the kube-dns Service.")
	fs.StringVar(&c.Token, "token", "", "Join token, as a server's up writes it in <data-dir>/token; it pins the cluster's CA.")
	fs.StringVar(&c.TokenFile, "token-file", "", "File holding the join token (safer than --token, which other users can see in the process list).")
	fs.BoolVar(&c.Proxy, "proxy", c.Proxy, "With --server: run kube-proxy as a static pod (with the node's credentials), so that Services' cluster IPs route on this node (needs the runc runtime, as root).")
	fs.StringVar(&c.ProxyMode, "proxy-mode", c.ProxyMode, "kube-proxy's mode: auto (nftables on Linux 5.13 or later with nft, else iptables), nftables or iptables.")
	return cmd
}

// quantityFlag is a resource quantity as a flag value ("10Mi").
type quantityFlag struct{ q *resource.Quantity }

func (f *quantityFlag) String() string {
	if f.q == nil {
		return ""
	}
	return f.q.String()
}

func (f *quantityFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return err
	}
	if q.Sign() <= 0 {
		return fmt.Errorf("%q: want a positive size", s)
	}
	*f.q = q
	return nil
}

func (f *quantityFlag) Type() string { return "quantity" }
