package controlplane

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	netutils "k8s.io/utils/net"

	"github.com/steadyplane/steadyplane/pkg/addons/kubeproxy"
	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/monitor"
	"github.com/steadyplane/steadyplane/pkg/join"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// Options configure a single-node control plane.
type Options struct {
	// DataDir holds the PKI, the kubeconfig, etcd's data and the logs.
	DataDir string
	// BindAddress is the address the API server listens on.
	BindAddress string
	// AdvertiseAddress is the address the API server publishes; empty means BindAddress.
	AdvertiseAddress string
	// APIServerPort is the API server's HTTPS port.
	APIServerPort int
	// EtcdClientPort and EtcdPeerPort are etcd's ports, on 127.0.0.1.
	EtcdClientPort, EtcdPeerPort int
	// ServiceCIDR is the range of service cluster IPs.
	ServiceCIDR string
	// RetryAfterIfNotInitialized turns on the KEP-3028 filter.
	RetryAfterIfNotInitialized bool
	// RetryAfter is the KEP-3028 delay.
	RetryAfter time.Duration
	// AlternativeServices turns on the KEP-3037 Alt-Svc filter. A single
	// server advertises nothing; it matters once more API servers share etcd.
	AlternativeServices bool
	// StaticPods runs the control plane as static pods on the node agent
	// (with runc; otherwise as child processes).
	StaticPods bool
	// Controllers starts the controller manager and the scheduler.
	Controllers bool
	// ControllerManagerPort and SchedulerPort are their secure ports on
	// 127.0.0.1 (health, metrics).
	ControllerManagerPort, SchedulerPort int
	// Node starts a node agent ("steadyplane node") as a third child.
	Node bool
	// NodeName is the node agent's Node; empty means "steadyplane".
	NodeName string
	// NodeIP is the Node's and its pods' address; empty means BindAddress.
	NodeIP string
	// NodeMetricsPort serves the node agent's metrics on 127.0.0.1; 0 for none.
	NodeMetricsPort int
	// NodeAPIPort is the node agent's API port on the node IP (logs, exec,
	// port-forward), the kubelet's 10250.
	NodeAPIPort int
	// PodSecurity is the Pod Security level enforced in every namespace
	// but kube-system and steadyplane-system (privileged, baseline or
	// restricted); restricted is warned about and audited.
	PodSecurity string
	// PodSecuritySet says PodSecurity was given (not the default): a
	// joining server takes the cluster's level otherwise.
	PodSecuritySet bool
	// PodSecurityConfigFile replaces that with the user's admission
	// configuration file (apiserver.config.k8s.io/v1 AdmissionConfiguration).
	PodSecurityConfigFile string
	// NodeRuntime is the node agent's --runtime: auto, runc or process.
	NodeRuntime string
	// PodCIDR is the node's range of pod addresses; CNIBridge the host
	// bridge pods join. A joining server's is chosen from ClusterCIDR.
	PodCIDR, CNIBridge string
	// ClusterCIDR is the cluster's range of pod addresses, split into
	// ranges of NodeCIDRMaskSize bits, one per node; it holds PodCIDR.
	ClusterCIDR      string
	NodeCIDRMaskSize int
	// Server is the URL of a server of the cluster this one joins, with
	// Token (or the file TokenFile) as printed by that cluster's first
	// "up"; empty for the first server. Ignored once joined.
	Server, Token, TokenFile string
	// TokenTTL is how long the join tokens the cluster's first start makes
	// are valid; 0 for ever.
	TokenTTL time.Duration
	// ClusterReset makes this server's etcd member a cluster of one, with
	// its data, before it starts: the recovery after losing the quorum
	// for good.
	ClusterReset bool
	// ClusterResetRestorePath, with ClusterReset, makes the cluster of one
	// from this etcd snapshot instead of the member's data.
	ClusterResetRestorePath string
	// ControlPlaneTaint taints this server's Node so that only pods that
	// tolerate it run there (ControlPlaneTaint); off, the taint it put
	// there before is taken off.
	ControlPlaneTaint bool
	// CertValidity is how long the leaf certificates up issues are valid;
	// each is renewed while up runs, at two thirds of it.
	CertValidity time.Duration
	// EtcdSnapshotInterval is how often a scheduled etcd snapshot is taken
	// (0: never); the newest EtcdSnapshotRetention are kept, in
	// EtcdSnapshotDir (<data-dir>/snapshots when empty).
	EtcdSnapshotInterval  time.Duration
	EtcdSnapshotRetention int
	EtcdSnapshotDir       string
	// Proxy runs upstream's kube-proxy ("steadyplane proxy") on the node, so
	// that Services route; it needs the node agent with the runc runtime
	// (pods on a pod network) and root.
	Proxy bool
	// ProxyMode is kube-proxy's mode: auto (nftables where the kernel has
	// it, iptables otherwise), nftables or iptables.
	ProxyMode string
	// ProxyHealthzPort and ProxyMetricsPort are kube-proxy's ports on
	// 127.0.0.1.
	ProxyHealthzPort, ProxyMetricsPort int
	// DNS deploys the cluster's DNS (CoreDNS, "steadyplane dns") with the
	// kube-dns Service at the tenth address of ServiceCIDR; it needs the
	// runc runtime, kube-proxy and the controllers.
	DNS bool
	// ClusterDomain is the cluster's DNS domain.
	ClusterDomain string
	// ResolvConf is the node's resolver file (the kubelet's
	// --resolv-conf); "" chooses /etc/resolv.conf, or systemd-resolved's
	// file where that names only a loopback stub.
	ResolvConf string
	// ReadinessController starts "steadyplane readiness-controller" (the
	// readiness-gate webhook and the load-balancer-ready gate).
	ReadinessController bool
	// ReadinessWebhookPort is the webhook's port on 127.0.0.1.
	ReadinessWebhookPort int
	// LocalStoragePath is where the node agent keeps its local volumes
	// (the local-path StorageClasses'); "" for <data-dir>/node/storage.
	LocalStoragePath string
	// Disable leaves add-ons out, by name (Disableable): the add-on
	// controllers ("servicelb") and the cluster's DNS ("coredns", as
	// DNS false).
	Disable []string
	// ExtraAPIServerArgs are appended to the API server's arguments, so they
	// override steadyplane's choices.
	ExtraAPIServerArgs []string
	// Fallback runs the API server as revisions rolled out by the
	// KubeAPIServer operator, each watched by a startup monitor that falls
	// back to the last-known-good revision: auto (with static pods, the
	// controllers and the node agent's read-only endpoint), on or off.
	Fallback fallback.Mode
	// FallbackTimeout and FallbackFirstStartTimeout are the startup
	// monitor's timeouts (ready; first start attempt).
	FallbackTimeout, FallbackFirstStartTimeout time.Duration
	// FallbackRetryBase and FallbackRetryMax are the operator's backoff
	// between retries of a revision that failed with a retried reason.
	FallbackRetryBase, FallbackRetryMax time.Duration
	// OperatorMetricsPort serves the operator's metrics on 127.0.0.1; 0
	// for none.
	OperatorMetricsPort int
	// Binary is the steadyplane executable to start the children from; empty
	// means this process's own executable.
	Binary string
	// ReadyTimeout bounds the wait for each component to become ready.
	ReadyTimeout time.Duration
	// StopGrace is how long a child may take to stop after SIGTERM.
	StopGrace time.Duration
	// StopPodsOnExit stops the node's pods when up stops. False stops the
	// control plane and leaves the workloads running, for the next up (of
	// this release or the next) to adopt: a restart or an upgrade by hand.
	StopPodsOnExit bool
	// Out receives progress lines; nil discards them.
	Out io.Writer

	// heldLock is the data directory's lock when Run took it before
	// Prepare (to choose the release under it).
	heldLock *os.File
}

// NewOptions returns the defaults of "steadyplane up".
func NewOptions() *Options {
	return &Options{
		DataDir:                    ".steadyplane",
		BindAddress:                "127.0.0.1",
		APIServerPort:              6443,
		EtcdClientPort:             2379,
		EtcdPeerPort:               2380,
		ServiceCIDR:                "10.96.0.0/16",
		TokenTTL:                   join.DefaultTokenTTL,
		EtcdSnapshotInterval:       12 * time.Hour,
		CertValidity:               pki.LeafValidity,
		EtcdSnapshotRetention:      5,
		RetryAfterIfNotInitialized: true,
		RetryAfter:                 5 * time.Second,
		AlternativeServices:        true,
		StaticPods:                 true,
		Controllers:                true,
		ControllerManagerPort:      10257,
		SchedulerPort:              10259,
		Node:                       true,
		NodeName:                   "steadyplane",
		NodeMetricsPort:            10255,
		NodeAPIPort:                10250,
		NodeRuntime:                "auto",
		PodSecurity:                "baseline",
		PodCIDR:                    "10.244.0.0/24",
		ClusterCIDR:                "10.244.0.0/16",
		NodeCIDRMaskSize:           24,
		CNIBridge:                  "steadyplane0",
		Proxy:                      true,
		ProxyMode:                  kubeproxy.ModeAuto,
		ProxyHealthzPort:           kubeproxy.DefaultHealthzPort,
		ProxyMetricsPort:           kubeproxy.DefaultMetricsPort,
		DNS:                        true,
		ClusterDomain:              "cluster.local",
		ReadinessController:        true,
		ReadinessWebhookPort:       9443,
		Fallback:                   fallback.ModeAuto,
		FallbackTimeout:            monitor.DefaultTimeouts.Ready,
		FallbackFirstStartTimeout:  monitor.DefaultTimeouts.FirstStart,
		FallbackRetryBase:          fallback.DefaultRetryBase,
		FallbackRetryMax:           fallback.DefaultRetryMax,
		OperatorMetricsPort:        10263,
		ReadyTimeout:               3 * time.Minute,
		StopGrace:                  30 * time.Second,
		StopPodsOnExit:             true,
	}
}

// complete fills in what follows from other options: a --pod-cidr outside
// the default cluster range (a single-node cluster's own choice) is the
// cluster's range, as it was before clusters had more than one node.
func (o *Options) complete() {
	def := NewOptions()
	if o.ClusterCIDR != def.ClusterCIDR || o.PodCIDR == def.PodCIDR {
		return
	}
	_, cluster, err := netutils.ParseCIDRSloppy(o.ClusterCIDR)
	ip, pods, err2 := netutils.ParseCIDRSloppy(o.PodCIDR)
	if err != nil || err2 != nil || cluster.Contains(ip) {
		return
	}
	ones, _ := pods.Mask.Size()
	o.ClusterCIDR, o.NodeCIDRMaskSize = pods.String(), ones
}

func (o *Options) validate() error {
	var errs []string
	if netutils.ParseIPSloppy(o.BindAddress) == nil {
		errs = append(errs, fmt.Sprintf("--bind-address=%q is not an IP address", o.BindAddress))
	}
	if o.AdvertiseAddress != "" && netutils.ParseIPSloppy(o.AdvertiseAddress) == nil {
		errs = append(errs, fmt.Sprintf("--advertise-address=%q is not an IP address", o.AdvertiseAddress))
	}
	for name, port := range map[string]int{"--apiserver-port": o.APIServerPort, "--etcd-client-port": o.EtcdClientPort, "--etcd-peer-port": o.EtcdPeerPort} {
		if port < 1 || port > 65535 {
			errs = append(errs, fmt.Sprintf("%s=%d is not a port", name, port))
		}
	}
	if o.EtcdClientPort == o.EtcdPeerPort {
		errs = append(errs, "--etcd-client-port and --etcd-peer-port must differ")
	}
	if _, _, err := netutils.ParseCIDRSloppy(o.ServiceCIDR); err != nil {
		errs = append(errs, fmt.Sprintf("--service-cidr=%q: %v", o.ServiceCIDR, err))
	}
	if _, cluster, err := netutils.ParseCIDRSloppy(o.ClusterCIDR); err != nil {
		errs = append(errs, fmt.Sprintf("--cluster-cidr=%q: %v", o.ClusterCIDR, err))
	} else if ones, bits := cluster.Mask.Size(); o.NodeCIDRMaskSize < ones || o.NodeCIDRMaskSize > bits {
		errs = append(errs, fmt.Sprintf("--node-cidr-mask-size=%d does not fit in --cluster-cidr=%s", o.NodeCIDRMaskSize, o.ClusterCIDR))
	} else if ip, pods, err := netutils.ParseCIDRSloppy(o.PodCIDR); err != nil || !cluster.Contains(ip) || !cluster.Contains(lastIP(pods)) {
		errs = append(errs, fmt.Sprintf("--pod-cidr=%s must lie in --cluster-cidr=%s", o.PodCIDR, o.ClusterCIDR))
	}
	if o.Server != "" && o.Token == "" && o.TokenFile == "" {
		errs = append(errs, "--server needs --token or --token-file (the first server's <data-dir>/token)")
	}
	if o.Token != "" && o.TokenFile != "" {
		errs = append(errs, "--token and --token-file exclude each other")
	}
	if o.ClusterResetRestorePath != "" && !o.ClusterReset {
		errs = append(errs, "--cluster-reset-restore-path needs --cluster-reset: a restore makes a cluster of one")
	}
	if o.CertValidity < pki.MinValidity {
		errs = append(errs, fmt.Sprintf("--cert-validity=%v: at least %v (a renewal, at two thirds, must reach every component before the old certificate ends)", o.CertValidity, pki.MinValidity))
	}
	if o.EtcdSnapshotInterval < 0 || o.EtcdSnapshotRetention < 1 {
		errs = append(errs, fmt.Sprintf("--etcd-snapshot-interval=%v --etcd-snapshot-retention=%d: an interval of 0 (no schedule) or more, and at least one snapshot kept", o.EtcdSnapshotInterval, o.EtcdSnapshotRetention))
	}
	if o.TokenTTL < 0 {
		errs = append(errs, fmt.Sprintf("--token-ttl=%v: a join token lives 0 (for ever) or more", o.TokenTTL))
	}
	if o.DataDir == "" {
		errs = append(errs, "--data-dir must not be empty")
	}
	if o.NodeIP != "" && netutils.ParseIPSloppy(o.NodeIP) == nil {
		errs = append(errs, fmt.Sprintf("--node-ip=%q is not an IP address", o.NodeIP))
	}
	if o.Node && len(validation.IsDNS1123Subdomain(o.NodeName)) > 0 {
		errs = append(errs, fmt.Sprintf("--node-name=%q is not a valid node name: %s", o.NodeName, strings.Join(validation.IsDNS1123Subdomain(o.NodeName), "; ")))
	}
	if err := validateDisable(o.Disable); err != nil {
		errs = append(errs, err.Error())
	}
	if o.ReadinessController && (o.ReadinessWebhookPort < 1 || o.ReadinessWebhookPort > 65535) {
		errs = append(errs, fmt.Sprintf("--readiness-webhook-port=%d is not a port", o.ReadinessWebhookPort))
	}
	if o.NodeMetricsPort < 0 || o.NodeMetricsPort > 65535 {
		errs = append(errs, fmt.Sprintf("--node-metrics-port=%d is not a port", o.NodeMetricsPort))
	}
	if o.Controllers && (o.ControllerManagerPort < 1 || o.ControllerManagerPort > 65535 || o.SchedulerPort < 1 || o.SchedulerPort > 65535) {
		errs = append(errs, fmt.Sprintf("--controller-manager-port=%d and --scheduler-port=%d must be ports", o.ControllerManagerPort, o.SchedulerPort))
	}
	if o.NodeAPIPort < 1 || o.NodeAPIPort > 65535 {
		errs = append(errs, fmt.Sprintf("--node-api-port=%d is not a port", o.NodeAPIPort))
	}
	if o.Proxy && (o.ProxyHealthzPort < 1 || o.ProxyHealthzPort > 65535 || o.ProxyMetricsPort < 1 || o.ProxyMetricsPort > 65535) {
		errs = append(errs, fmt.Sprintf("--proxy-healthz-port=%d and --proxy-metrics-port=%d must be ports", o.ProxyHealthzPort, o.ProxyMetricsPort))
	}
	if msgs := validation.IsDNS1123Subdomain(o.ClusterDomain); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("--cluster-domain=%q: %s", o.ClusterDomain, strings.Join(msgs, "; ")))
	}
	switch o.Fallback {
	case fallback.ModeAuto, fallback.ModeOff:
	case fallback.ModeOn:
		if !o.Node || !o.StaticPods || !o.Controllers || o.NodeMetricsPort == 0 {
			errs = append(errs, "--static-pod-fallback=on needs --node, --static-pods, --controllers and a --node-metrics-port (the startup monitor reads the node agent's local status there)")
		}
	default:
		errs = append(errs, fmt.Sprintf("--static-pod-fallback=%q: auto, on or off", o.Fallback))
	}
	if o.FallbackTimeout <= 0 || o.FallbackFirstStartTimeout <= 0 || o.FallbackRetryBase <= 0 || o.FallbackRetryMax < o.FallbackRetryBase {
		errs = append(errs, "--fallback-timeout, --fallback-first-start-timeout and --fallback-retry-base must be positive, --fallback-retry-max at least the base")
	}
	if o.OperatorMetricsPort < 0 || o.OperatorMetricsPort > 65535 {
		errs = append(errs, fmt.Sprintf("--operator-metrics-port=%d is not a port", o.OperatorMetricsPort))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// lastIP is the last address of n.
func lastIP(n *net.IPNet) net.IP {
	ip := make(net.IP, len(n.IP))
	for i := range n.IP {
		ip[i] = n.IP[i] | ^n.Mask[i]
	}
	return ip
}
