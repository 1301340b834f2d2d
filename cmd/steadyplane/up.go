package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/controlplane"
)

func newUpCommand() *cobra.Command {
	o := controlplane.NewOptions()
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a cluster's server (etcd, kube-apiserver, controller manager, scheduler, node agent) until interrupted; --server/--token join another",
		Long: `Run a single-node cluster: create or reuse the certificates, keys and kubeconfigs
in the data directory (one client certificate per component), start "steadyplane etcd",
"steadyplane apiserver", "steadyplane controller-manager" and "steadyplane scheduler"
(upstream's, with leader election), a node agent ("steadyplane node", which runs pods
under runc with their own network, or as host processes without root or runc) and the
readiness-gate webhook and controller ("steadyplane readiness-controller") and the add-on
controllers ("steadyplane addon-controllers": the default StorageClass local-path, and
LoadBalancer Services on the nodes' addresses) as child processes, with CoreDNS and
metrics-server (kubectl top, autoscaling) as Deployments (--disable leaves add-ons out), print how to reach the cluster, restart a child that dies, and stop them all
cleanly, in reverse order, on Ctrl-C or SIGTERM (with --stop-pods-on-exit=false the
workloads keep running for the next up to adopt). Running it again on the same data
directory keeps every object created before; a second "up" on a directory in use is
refused.

With --bind-address on a host address, the first server prints how other hosts join:
"up --server <its URL> --token-file <file with its token>" on another host makes that
host a server of the same cluster (its etcd member joins as a learner and is promoted
once caught up). Every kubeconfig up writes lists all servers, so clients need no load
balancer. Running up again on a joined data directory restarts it as a member.`,
		Example: `  steadyplane up
  kubectl --kubeconfig .steadyplane/admin.kubeconfig get namespaces

  steadyplane up --data-dir /tmp/sp --apiserver-port 7443 --apiserver-arg=--v=2

  # three servers, no load balancer
  steadyplane up --bind-address 10.0.0.1                                   # host 1; token in .steadyplane/token
  steadyplane up --bind-address 10.0.0.2 --server https://10.0.0.1:6443 --token-file token   # hosts 2, 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			o.Out = cmd.OutOrStdout()
			o.PodSecuritySet = cmd.Flags().Changed("pod-security")
			return controlplane.Run(ctx, *o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Directory for certificates, kubeconfig, etcd data and logs; reused across runs.")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "Address the API server listens on.")
	fs.StringVar(&o.AdvertiseAddress, "advertise-address", o.AdvertiseAddress, "Address the API server publishes to the cluster; defaults to --bind-address.")
	fs.IntVar(&o.APIServerPort, "apiserver-port", o.APIServerPort, "HTTPS port of the API server.")
	fs.IntVar(&o.EtcdClientPort, "etcd-client-port", o.EtcdClientPort, "etcd client port: on 127.0.0.1, and on --bind-address when that is a host address (other servers join there).")
	fs.IntVar(&o.EtcdPeerPort, "etcd-peer-port", o.EtcdPeerPort, "etcd peer port: on --bind-address when that is a host address, else on 127.0.0.1.")
	fs.StringVar(&o.ServiceCIDR, "service-cidr", o.ServiceCIDR, "Range of service cluster IPs; its first address is the kubernetes service's.")
	fs.BoolVar(&o.RetryAfterIfNotInitialized, "startup-send-retry-after-if-not-initialized", o.RetryAfterIfNotInitialized, "KEP-3028: refuse requests carrying X-Kubernetes-If-Ready with 503 + Retry-After until the API server has initialized.")
	fs.DurationVar(&o.RetryAfter, "startup-retry-after", o.RetryAfter, "Retry-After delay sent while the API server initializes.")
	fs.BoolVar(&o.AlternativeServices, "enable-alternative-services", o.AlternativeServices, "KEP-3037: send authenticated HTTP/2 clients an Alt-Svc header listing the live API servers (nothing while this is the only one).")
	fs.BoolVar(&o.Node, "node", o.Node, "Also run a node agent (steadyplane node) that runs the pods.")
	fs.StringVar(&o.NodeRuntime, "runtime", o.NodeRuntime, "The node agent's container runtime: runc (isolated; root and runc), process (host processes, not isolated), auto (runc when possible).")
	fs.StringVar(&o.PodSecurity, "pod-security", o.PodSecurity, "Pod Security level enforced in every namespace but kube-system and steadyplane-system: privileged, baseline or restricted (restricted is always warned about and audited); a namespace's pod-security.kubernetes.io/enforce label chooses its own. A joining server takes the cluster's unless given this or --pod-security-config.")
	fs.StringVar(&o.PodSecurityConfigFile, "pod-security-config", "", "The API server's admission configuration file (AdmissionConfiguration with a PodSecurity plugin configuration), instead of --pod-security's.")
	fs.StringVar(&o.PodCIDR, "pod-cidr", o.PodCIDR, "Range of pod addresses; must overlap no route of the host.")
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", o.ClusterCIDR, "The cluster's range of pod addresses; each node gets a range of --node-cidr-mask-size bits from it (the first server's holds --pod-cidr). Joining servers take the cluster's.")
	fs.IntVar(&o.NodeCIDRMaskSize, "node-cidr-mask-size", o.NodeCIDRMaskSize, "Size of each node's pod range in --cluster-cidr, in bits.")
	fs.StringVar(&o.Server, "server", "", "Join the cluster of this API server (https://host:port) as another server, with --token or --token-file; ignored once this data directory has joined.")
	fs.StringVar(&o.Token, "token", "", "Join token, as the first server's up prints it (its <data-dir>/token); it pins the cluster's CA.")
	fs.StringVar(&o.TokenFile, "token-file", "", "File holding the join token (safer than --token, which other users can see in the process list).")
	fs.DurationVar(&o.TokenTTL, "token-ttl", o.TokenTTL, "How long the join tokens the cluster's first start makes (<data-dir>/token, <data-dir>/node-token) are valid; 0 for ever. steadyplane token create makes others.")
	fs.BoolVar(&o.ClusterReset, "cluster-reset", false, "Make this server's etcd member a cluster of one with its data (etcd's --force-new-cluster), then exit: the way back after losing the other servers for good, when writes fail for want of an etcd quorum. Start up again without it; the other servers join again from new data directories.")
	fs.StringVar(&o.ClusterResetRestorePath, "cluster-reset-restore-path", "", "With --cluster-reset: make the cluster of one from this etcd snapshot (steadyplane etcd-snapshot list), of this cluster and whole, instead of the member's data, which is kept beside it (<data-dir>/etcd.before-restore-<time>).")
	fs.DurationVar(&o.EtcdSnapshotInterval, "etcd-snapshot-interval", o.EtcdSnapshotInterval, "How often to take a scheduled snapshot of this server's etcd member; 0 for never.")
	fs.IntVar(&o.EtcdSnapshotRetention, "etcd-snapshot-retention", o.EtcdSnapshotRetention, "How many scheduled snapshots to keep (those taken with etcd-snapshot save stay until deleted).")
	fs.StringVar(&o.EtcdSnapshotDir, "etcd-snapshot-dir", "", "Directory of the snapshots (default <data-dir>/snapshots).")
	fs.DurationVar(&o.CertValidity, "cert-validity", o.CertValidity, "How long the leaf certificates up issues are valid (the CAs are valid 10 years). Each is renewed while up runs, at two thirds of it, without a restart (steadyplane certs check-expiration). A shorter validity applies at the next start.")
	fs.BoolVar(&o.ControlPlaneTaint, "control-plane-taint", o.ControlPlaneTaint, "Taint this server's Node node-role.kubernetes.io/control-plane:NoSchedule, so that only pods that tolerate it (the cluster's own) run there: for clusters with workers. Every server's Node is labelled with the role control-plane; without this flag a taint an earlier start put there is taken off.")
	fs.StringVar(&o.CNIBridge, "cni-bridge", o.CNIBridge, "Host bridge the pods' interfaces join.")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of the node agent's Node.")
	fs.StringVar(&o.NodeIP, "node-ip", o.NodeIP, "Address of the Node and of hostNetwork pods; defaults to the advertise address (as root with runc and the API server on loopback, the address up puts on the pods' bridge, the first of --pod-cidr).")
	fs.BoolVar(&o.StaticPods, "static-pods", o.StaticPods, "Run etcd, the API server, the controller manager and the scheduler as static pods on the node agent (needs the runc runtime; otherwise, or when false, as child processes of up).")
	fs.BoolVar(&o.Controllers, "controllers", o.Controllers, "Run the controller manager and the scheduler.")
	fs.IntVar(&o.ControllerManagerPort, "controller-manager-port", o.ControllerManagerPort, "Secure port of the controller manager on 127.0.0.1 (health, metrics).")
	fs.IntVar(&o.SchedulerPort, "scheduler-port", o.SchedulerPort, "Secure port of the scheduler on 127.0.0.1 (health, metrics).")
	fs.IntVar(&o.NodeAPIPort, "node-api-port", o.NodeAPIPort, "Port of the node agent's API on the node IP (kubectl logs, exec, port-forward go there through the API server), as the kubelet's.")
	fs.IntVar(&o.NodeMetricsPort, "node-metrics-port", o.NodeMetricsPort, "Port on 127.0.0.1 for the node agent's Prometheus metrics; 0 for none.")
	fs.BoolVar(&o.Proxy, "proxy", o.Proxy, "Run kube-proxy (steadyplane proxy) on the node, so that Services' cluster IPs and node ports route to their pods.")
	fs.StringVar(&o.ProxyMode, "proxy-mode", o.ProxyMode, "kube-proxy's mode: auto (nftables on Linux 5.13 or later with nft, else iptables), nftables or iptables.")
	fs.IntVar(&o.ProxyHealthzPort, "proxy-healthz-port", o.ProxyHealthzPort, "Port of kube-proxy's health check, on the node's address (the load-balancer gate reads it there).")
	fs.IntVar(&o.ProxyMetricsPort, "proxy-metrics-port", o.ProxyMetricsPort, "Port of kube-proxy's Prometheus metrics on 127.0.0.1.")
	fs.BoolVar(&o.DNS, "dns", o.DNS, "Deploy the cluster's DNS: CoreDNS (steadyplane dns) in kube-system behind the kube-dns Service at the tenth address of --service-cidr; pods with dnsPolicy ClusterFirst resolve Services by name.")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", o.ClusterDomain, "The cluster's DNS domain.")
	fs.StringVar(&o.ResolvConf, "resolv-conf", o.ResolvConf, "The node's resolver file: pods with dnsPolicy Default (CoreDNS among them, for names outside the cluster) get its servers; default /etc/resolv.conf, or systemd-resolved's where that names only a loopback stub. A file with no nameserver resolves nothing outside the cluster.")
	fs.BoolVar(&o.ReadinessController, "readiness-controller", o.ReadinessController, "Also run the readiness-gate webhook and the steadyplane.io/load-balancer-ready gate (steadyplane readiness-controller).")
	fs.IntVar(&o.ReadinessWebhookPort, "readiness-webhook-port", o.ReadinessWebhookPort, "HTTPS port of the readiness-gate webhook, on 127.0.0.1 (every server runs one, which its own API server calls). Joining servers take the cluster's.")
	fs.StringSliceVar(&o.Disable, "disable", nil, "Add-ons to leave out, comma-separated, of: "+strings.Join(controlplane.Disableable(), ", ")+" (as k3s's --disable). local-storage provisions node-local volumes for the default StorageClass local-path (and local-path-retain), servicelb gives LoadBalancer Services the Ready nodes' addresses (both steadyplane addon-controllers), metrics-server serves kubectl top and autoscaling; coredns is --dns=false.")
	fs.StringVar(&o.LocalStoragePath, "local-storage-path", "", "Directory of this node's local volumes (StorageClasses local-path and local-path-retain); default <data-dir>/node/storage. Their data stays across restarts of up.")
	fs.StringArrayVar(&o.ExtraAPIServerArgs, "apiserver-arg", nil, "Extra kube-apiserver flag, e.g. --apiserver-arg=--v=4 (repeatable; overrides steadyplane's choice of the same flag).")
	fs.Var(&o.Fallback, "static-pod-fallback", "Roll out the API server's configuration (kubectl edit kubeapiserver cluster) as revisions with a startup monitor that falls back to the last-known-good revision: auto (on with static pods and the controllers), on or off.")
	fs.DurationVar(&o.FallbackTimeout, "fallback-timeout", o.FallbackTimeout, "How long a started API server revision may take to become healthy and ready before the startup monitor falls back (Unhealthy, EtcdUnhealthy, NotReady).")
	fs.DurationVar(&o.FallbackFirstStartTimeout, "fallback-first-start-timeout", o.FallbackFirstStartTimeout, "How long the startup monitor waits for the first start attempt of a revision (NeverStartedUp).")
	fs.DurationVar(&o.FallbackRetryBase, "fallback-retry-base", o.FallbackRetryBase, "Wait before the operator retries a revision that failed with a retried reason (EtcdUnhealthy, NotReady, Unhealthy); doubles with every fallback.")
	fs.DurationVar(&o.FallbackRetryMax, "fallback-retry-max", o.FallbackRetryMax, "Longest wait between retries.")
	fs.IntVar(&o.OperatorMetricsPort, "operator-metrics-port", o.OperatorMetricsPort, "Port on 127.0.0.1 for the KubeAPIServer operator's Prometheus metrics; 0 for none.")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", o.ReadyTimeout, "How long to wait for etcd and for the API server to become ready.")
	fs.DurationVar(&o.StopGrace, "stop-grace", o.StopGrace, "How long each component may take to stop before it is killed.")
	fs.BoolVar(&o.StopPodsOnExit, "stop-pods-on-exit", o.StopPodsOnExit, "Stop the node's pods when up stops (Ctrl-C, SIGTERM). false: the control plane stops and the workloads keep running; the next up on this data directory, of this release or the next, adopts them (same containers, restart counts unchanged).")
	return cmd
}
