package main

import (
	"context"
	goflag "flag"
	"fmt"
	"io"
	"maps"
	stdnet "net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/clusterdns"
	"github.com/steadyplane/steadyplane/pkg/controlplane"
	"github.com/steadyplane/steadyplane/pkg/controlplane/join"
	"github.com/steadyplane/steadyplane/pkg/node/agent"
	"github.com/steadyplane/steadyplane/pkg/node/images"
	"github.com/steadyplane/steadyplane/pkg/node/podnet"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/process"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
)

// setUpRuntime chooses the container runtime for mode and, for runc, the
// pod network.
func setUpRuntime(o *agent.Options, mode string, net podnet.Config, logs logRotation) error {
	name, warning, err := runc.Choose(mode)
	if err != nil {
		return err
	}
	if warning != "" {
		klog.Warningf("Node agent: %s", warning)
		fmt.Fprintf(os.Stderr, "WARNING: %s\n", warning)
	}
	if name == "process" {
		o.Runtime = process.Runtime{}
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	rt, err := runc.New(runc.Options{Root: filepath.Join(o.RootDir, "runc"), ExitHook: []string{self, "container-exited"},
		LogMaxSize: logs.maxSize.Value(), LogMaxFiles: logs.maxFiles})
	if err != nil {
		return err
	}
	net.IPAMDir, net.NAT = filepath.Join(o.RootDir, "cni", "ipam"), podnet.IPTablesAvailable()
	network, err := podnet.New(net, filepath.Join(o.RootDir, "cni", "net.conflist"), filepath.Join(o.RootDir, "cni", "cache"))
	if err != nil {
		return err
	}
	o.Runtime, o.Network = rt, network
	return nil
}

// setUpImages opens the node's image store and imports the archives of
// importDir ("" for none) into it.
func setUpImages(o *agent.Options, storeDir, importDir, registriesFile string) error {
	if !o.Runtime.Isolated() {
		return nil // host processes run host commands; images are not used
	}
	regs, err := images.LoadRegistries(registriesFile)
	if err != nil {
		return err
	}
	o.Registries = regs
	if storeDir == "" {
		storeDir = images.StoreDir(o.RootDir)
	}
	store, err := images.Open(storeDir)
	if err != nil {
		return err
	}
	o.Images = store
	if importDir == "" {
		return nil
	}
	start := time.Now()
	imported, err := store.ImportDir(importDir, images.UnpackOptions{Rootless: os.Geteuid() != 0}, func(path string, err error) {
		klog.ErrorS(err, "Importing an image archive", "archive", path)
		fmt.Fprintf(os.Stderr, "WARNING: image archive %s not imported: %v\n", path, err)
	})
	if err != nil {
		return fmt.Errorf("importing the image archives of %s: %w", importDir, err)
	}
	for _, img := range imported {
		klog.InfoS("Imported an image", "names", img.Names, "id", img.ID, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

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
	o := agent.Options{NodeName: hostname, NodeIP: "127.0.0.1", RootDir: "/var/lib/steadyplane/node", StopPodsOnExit: true, ResolverConfig: "/etc/resolv.conf"}
	var kubeconfig, runtimeMode, imageStore, imageImportDir, registriesFile, server, token, tokenFile, proxyMode string
	proxy := true
	evictionHard := maps.Clone(agent.DefaultEvictionHard)
	apiPort := 10250
	net := podnet.Config{PodCIDR: "10.244.0.0/24", Bridge: "steadyplane0"}
	logs := logRotation{maxSize: resource.MustParse("10Mi"), maxFiles: crilog.DefaultMaxFiles}
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
/pods and /localstatus/pods: the truth while no API server answers.

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
			var proxyKubeconfig string
			if server != "" {
				// Static pods name their files by absolute path.
				root, err := filepath.Abs(o.RootDir)
				if err != nil {
					return err
				}
				o.RootDir = root
				creds, err := bootstrapWorker(ctx, cmd, server, token, tokenFile, o)
				if err != nil {
					return err
				}
				kubeconfig, o.TLSCertFile, o.TLSKeyFile, o.ClientCAFile, net.PodCIDR = creds.Kubeconfig, creds.CertFile, creds.KeyFile, creds.CAFile, creds.PodCIDR
				proxyKubeconfig = creds.ProxyKubeconfig
			} else if kubeconfig == "" {
				return fmt.Errorf("--kubeconfig, or --server with --token or --token-file, is required")
			}
			// Both client options: fail over between API servers, wait out
			// one that is initializing.
			cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{AltSvc: altsvcclient.Options{CacheDir: filepath.Join(o.RootDir, "alternative-services")}})
			if err != nil {
				return err
			}
			if logs.maxFiles < 1 {
				return fmt.Errorf("--container-log-max-files=%d: want at least 1", logs.maxFiles)
			}
			if err := setUpRuntime(&o, runtimeMode, net, logs); err != nil {
				return err
			}
			if err := setUpImages(&o, imageStore, imageImportDir, registriesFile); err != nil {
				return err
			}
			if server != "" {
				if err := setUpWorker(ctx, cmd, &o, cfg, workerAddOns{proxy: proxy, proxyMode: proxyMode, proxyKubeconfig: proxyKubeconfig}); err != nil {
					return err
				}
			}
			if o.EvictionHard, err = agent.ParseEvictionHard(evictionHard); err != nil {
				return err
			}
			switch {
			case apiPort < 0 || apiPort > 65535:
				return fmt.Errorf("--port=%d is not a port", apiPort)
			case apiPort == 0:
			case o.TLSCertFile == "" || o.TLSKeyFile == "" || o.ClientCAFile == "":
				klog.InfoS("WARNING: no --tls-cert-file, --tls-private-key-file and --client-ca-file: the node API is off, so kubectl logs, exec, attach and port-forward cannot reach this node's pods")
			default:
				o.APIAddress = stdnet.JoinHostPort(o.NodeIP, strconv.Itoa(apiPort))
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
	fs.StringVar(&o.NodeIP, "node-ip", o.NodeIP, "Address of the Node, and of hostNetwork pods.")
	fs.StringVar(&runtimeMode, "runtime", "auto", "Container runtime: runc (isolated; needs root and runc), process (host processes, not isolated), or auto (runc when possible, else process with a warning).")
	fs.StringVar(&net.PodCIDR, "pod-cidr", net.PodCIDR, "Range of pod addresses on this node (until the Node's spec.podCIDR is allocated); must overlap no route of the host.")
	fs.StringVar(&net.Bridge, "cni-bridge", net.Bridge, "Host bridge the pods' interfaces join.")
	fs.StringVar(&o.RootDir, "root-dir", o.RootDir, "Directory for pod directories and container logs.")
	fs.StringVar(&o.PodManifestPath, "pod-manifest-path", o.PodManifestPath, "Directory of static pod manifests (YAML or JSON), watched for changes; empty for none.")
	fs.IntVar(&apiPort, "port", apiPort, "Port of the node API on --node-ip (logs, exec, attach, port-forward for the API server), as the kubelet's; 0 for none.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "Serving certificate of the node API, signed by the cluster CA for --node-ip.")
	fs.StringVar(&o.TLSKeyFile, "tls-private-key-file", o.TLSKeyFile, "Key of --tls-cert-file.")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA that signs the client certificates of the node API's callers (the API server's --kubelet-client-certificate); other callers use bearer tokens (TokenReview). Every request is authorized by SubjectAccessReview on the Node's subresources (nodes/proxy, nodes/log, nodes/metrics, ...).")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "Loopback address of the read-only endpoint (no authentication, as the kubelet's read-only port): /metrics, /healthz, /pods and /localstatus/pods (start attempts, restarts, last exits), e.g. 127.0.0.1:10255; empty for none.")
	fs.BoolVar(&o.StopPodsOnExit, "stop-pods-on-exit", o.StopPodsOnExit, "Stop every container when the agent stops, and with it if it crashes; false leaves them running until the next agent replaces them.")
	fs.StringVar(&imageStore, "image-store", "", "Directory of the node's image store (default <root-dir>/image-store): pulled and imported images, each layer unpacked once.")
	fs.StringVar(&imageImportDir, "image-import-dir", "", "Directory whose image archives (docker save or OCI, *.tar, *.tar.gz) are imported at start; empty for none. `up` uses <data-dir>/images.")
	fs.Var(&quantityFlag{&logs.maxSize}, "container-log-max-size", "Size at which a container's log is rotated, as the kubelet's (e.g. 10Mi).")
	fs.IntVar(&logs.maxFiles, "container-log-max-files", logs.maxFiles, "Log files kept per container run, the current one included, as the kubelet's.")
	fs.Int64Var(&o.PodPidsLimit, "pod-max-pids", 0, "Most processes and threads each container may have (cgroup pids.max), as the kubelet's --pod-max-pids; 0 for no limit. `up` sets 4096.")
	fs.BoolVar(&o.SeccompDefault, "seccomp-default", false, "Give containers that name no seccomp profile RuntimeDefault (Docker's and containerd's default filter) instead of Unconfined, as the kubelet's flag. Localhost profiles are read from <root-dir>/seccomp.")
	fs.StringVar(&registriesFile, "registries-config", "", "The node's registries file, as k3s's registries.yaml: mirrors tried before a registry (an http:// endpoint allows plain HTTP to it), and per registry host a login (auth) and a CA (tls.ca_file); insecure_skip_verify is refused. A file that does not exist is none. `up` uses <data-dir>/registries.yaml.")
	fs.StringSliceVar(&o.InsecureRegistries, "insecure-registry", nil, "Registry (host or host:port) that may be pulled from over plain HTTP; registries on loopback addresses always may. Repeatable.")
	fs.DurationVar(&o.StatusInterval, "node-status-update-frequency", o.StatusInterval, "How often the Node's Ready heartbeat is written (default 10s).")
	fs.Var(cliflag.NewLangleSeparatedMapStringString(&evictionHard), "eviction-hard", "Hard eviction thresholds, as the kubelet's (e.g. memory.available<100Mi,nodefs.available<10%): below one the Node reports MemoryPressure, DiskPressure or PIDPressure and the agent evicts a pod every 10s, BestEffort and pods over their requests first, never static or critical pods. Signals: memory.available, nodefs.available, imagefs.available, pid.available; a value of 0% or 100% turns one off, as the kubelet's; giving the flag replaces every default.")
	fs.IPSliceVar(&o.ClusterDNS, "cluster-dns", nil, "The cluster's DNS servers (comma-separated), as the kubelet's: ClusterFirst pods resolve with them; without, ClusterFirst falls back to Default with a MissingClusterDNS event. `up` gives the kube-dns Service's address.")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", "", "The cluster's DNS domain (e.g. cluster.local), as the kubelet's: ClusterFirst pods search <namespace>.svc.<domain>, svc.<domain> and <domain>, and a pod with a subdomain is <hostname>.<subdomain>.<namespace>.svc.<domain>.")
	fs.StringVar(&o.ResolverConfig, "resolv-conf", o.ResolverConfig, "The node's resolver file, as the kubelet's: Default pods get its servers and search path, and ClusterFirst pods' search path extends with its; empty for none.")
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlag(klogFlags.Lookup("v"))
	fs.StringVar(&server, "server", "", "Join the cluster of this API server (https://host:port) as a worker: the node asks for its client and serving certificates (TLS bootstrapping, kept in <root-dir>/bootstrap) with --token or --token-file, instead of --kubeconfig and --tls-*; its pods get the range the controller manager allocates to its Node; it runs kube-proxy as a static pod (--proxy) and takes the cluster DNS's address and domain from the kube-dns Service.")
	fs.StringVar(&token, "token", "", "Join token, as a server's up writes it in <data-dir>/token; it pins the cluster's CA.")
	fs.StringVar(&tokenFile, "token-file", "", "File holding the join token (safer than --token, which other users can see in the process list).")
	fs.BoolVar(&proxy, "proxy", proxy, "With --server: run kube-proxy as a static pod (with the node's credentials), so that Services' cluster IPs route on this node (needs the runc runtime, as root).")
	fs.StringVar(&proxyMode, "proxy-mode", controlplane.ProxyModeAuto, "kube-proxy's mode: auto (nftables on Linux 5.13 or later with nft, else iptables), nftables or iptables.")
	return cmd
}

// bootstrapWorker gets a worker node's credentials from the cluster of
// server with the join token (join.Bootstrap).
func bootstrapWorker(ctx context.Context, cmd *cobra.Command, server, token, tokenFile string, o agent.Options) (*join.WorkerCredentials, error) {
	if (token == "") == (tokenFile == "") {
		return nil, fmt.Errorf("--server needs exactly one of --token and --token-file")
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token = string(b)
	}
	tok, err := join.ParseToken(token)
	if err != nil {
		return nil, err
	}
	out := cmd.OutOrStdout()
	return join.Bootstrap(ctx, join.Worker{Server: server, Token: tok, Dir: filepath.Join(o.RootDir, "bootstrap"), NodeName: o.NodeName, NodeIP: o.NodeIP,
		Logf: func(f string, a ...any) { fmt.Fprintf(out, f+"\n", a...) }})
}

// workerAddOns are what a worker runs besides its pods: kube-proxy and
// the cluster DNS's settings.
type workerAddOns struct {
	proxy                      bool
	proxyMode, proxyKubeconfig string
}

// setUpWorker gives a worker node (node --server) what a server's up
// gives its node: kube-proxy as a static pod of its own agent, and the
// cluster's DNS for its ClusterFirst pods with the image CoreDNS runs
// from (its pods may be scheduled here).
func setUpWorker(ctx context.Context, cmd *cobra.Command, o *agent.Options, cfg *rest.Config, add workerAddOns) error {
	out := cmd.OutOrStdout()
	if os.Geteuid() != 0 || !o.Runtime.Isolated() {
		fmt.Fprintln(out, "WARNING: no kube-proxy and no cluster DNS on this node: they need the runc runtime, as root; Services' cluster IPs do not route here")
		return setUpWorkerProxy(out, o, false, "", "", "")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Static pods and the DNS image use a copy that outlives this
	// binary's path.
	binary, err := controlplane.InstallBinary(self, filepath.Join(o.RootDir, "bin"))
	if err != nil {
		return err
	}
	if err := setUpWorkerProxy(out, o, add.proxy, add.proxyMode, add.proxyKubeconfig, binary); err != nil {
		return err
	}
	if len(o.ClusterDNS) == 0 {
		if !add.proxy {
			// Its address is a cluster IP, which nothing would route here.
			fmt.Fprintf(out, "no cluster DNS without kube-proxy (--proxy=false); give --cluster-dns for another proxy; ClusterFirst pods resolve with %s\n", o.ResolverConfig)
			return nil
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ip, domain, found, err := clusterdns.Find(fctx, client)
		cancel()
		switch {
		case err != nil:
			// The node runs its pods all the same; they lack the
			// cluster's names until a restart finds them.
			klog.ErrorS(err, "Reading the cluster's DNS; ClusterFirst pods fall back to Default (MissingClusterDNS)")
			fmt.Fprintf(out, "WARNING: no cluster DNS: %v; ClusterFirst pods resolve with %s until the node agent starts again (or give --cluster-dns)\n", err, o.ResolverConfig)
			return nil
		case !found:
			fmt.Fprintf(out, "no cluster DNS: the cluster has no %s/%s Service; ClusterFirst pods resolve with %s\n", clusterdns.Namespace, clusterdns.ServiceName, o.ResolverConfig)
			return nil
		}
		o.ClusterDNS = []stdnet.IP{stdnet.ParseIP(ip)}
		if o.ClusterDomain == "" {
			o.ClusterDomain = domain
		}
	}
	// CoreDNS's pods may be scheduled here: the image goes straight into
	// the store (a server writes an archive its agent imports).
	ref := controlplane.DNSImageRef(binary)
	if err := o.Images.AddExecutable(binary, controlplane.DNSImageBinary, ref, images.UnpackOptions{}); err != nil {
		return fmt.Errorf("the DNS image: %w", err)
	}
	fmt.Fprintf(out, "cluster DNS: %s, domain %s (image %s)\n", o.ClusterDNS[0], o.ClusterDomain, ref)
	return nil
}

// setUpWorkerProxy writes kube-proxy's static pod into the manifest
// directory (default <root-dir>/manifests, which it then watches), or
// without it removes the one an earlier start wrote there.
func setUpWorkerProxy(out io.Writer, o *agent.Options, proxy bool, mode, kubeconfig, binary string) error {
	defaultDir := filepath.Join(o.RootDir, "manifests")
	if !proxy {
		if err := os.Remove(filepath.Join(defaultDir, "kube-proxy.yaml")); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	if o.PodManifestPath == "" {
		o.PodManifestPath = defaultDir
	}
	if err := os.MkdirAll(o.PodManifestPath, 0o700); err != nil {
		return err
	}
	chosen, warning, err := controlplane.WorkerProxy(o.PodManifestPath, binary, mode, kubeconfig, o.NodeName, o.NodeIP)
	if err != nil {
		return err
	}
	if warning != "" {
		fmt.Fprintf(out, "WARNING: %s\n", warning)
	}
	fmt.Fprintf(out, "kube-proxy (%s mode) runs as a static pod: %s\n", chosen, filepath.Join(o.PodManifestPath, "kube-proxy.yaml"))
	return nil
}

// logRotation is how container logs are rotated.
type logRotation struct {
	maxSize  resource.Quantity
	maxFiles int
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
