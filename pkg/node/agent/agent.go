// Package agent is steadyplane's node agent ("steadyplane node"), as the
// kubelet is upstream's: it registers the Node and keeps its status and
// Lease (node.go), admits the pods bound to it (admission.go) and runs each
// in a pod worker of its own (package podworker; pods.go), runs static pods
// from a manifest directory with their mirror pods (static.go), evicts
// pods when the node runs short (pressure.go, pressure_eviction.go), routes
// other nodes' pod ranges (peers.go), and serves the node API to the API
// server (nodeapi.go, package kubeletapi). Static pods run before any API
// server answers, and keep running while it is away.
package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/steadyplane/steadyplane/pkg/addons/localpath"
	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/buildinfo"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	"k8s.io/kubernetes/pkg/kubelet/network/dns"
	"k8s.io/utils/clock"

	"github.com/steadyplane/steadyplane/pkg/client/patient"
	"github.com/steadyplane/steadyplane/pkg/metricsserver"
	"github.com/steadyplane/steadyplane/pkg/node/images"
	"github.com/steadyplane/steadyplane/pkg/node/kubeletapi"
	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/node/podnet"
	"github.com/steadyplane/steadyplane/pkg/node/podworker"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
	"github.com/steadyplane/steadyplane/pkg/node/stats"
	"github.com/steadyplane/steadyplane/pkg/node/volume"
)

// Options configure a node agent.
type Options struct {
	// NodeName is the Node's name; its credentials must be system:node:<NodeName>.
	NodeName string
	// NodeIP is the Node's address, and the address of host-network pods.
	NodeIP string
	// Runtime runs containers (runc, or host processes).
	Runtime runtime.Runtime
	// Network gives pods their own network namespace an address; nil
	// leaves every pod on the host's network.
	Network *podnet.Network
	// RootDir holds pod directories and container logs.
	RootDir string
	// PodManifestPath is a directory of static pod manifests; "" for none.
	PodManifestPath string
	// MetricsAddress is the read-only endpoint on a loopback address, as
	// the kubelet's read-only port: /metrics, /healthz, /pods and
	// /localstatus/pods, without authentication; "" for none.
	MetricsAddress string
	// APIAddress is where the authenticated node API listens (the node's
	// IP, port 10250): logs, exec, attach, port-forward for the API server;
	// "" for none. TLSCertFile and TLSKeyFile are its serving certificate,
	// ClientCAFile verifies client certificates.
	APIAddress                            string
	TLSCertFile, TLSKeyFile, ClientCAFile string
	// StatusInterval is how often the Node's Ready heartbeat is written.
	StatusInterval time.Duration
	// StopPodsOnExit stops every container when the agent stops (SIGTERM,
	// then SIGKILL after the pod's grace period), and makes containers die
	// with an agent that crashes. Without it containers keep running; the
	// next agent stops each one it finds and starts it again, once.
	StopPodsOnExit bool
	// Images is the node's image store; nil runs only pods of the host
	// runtime class (and every pod under the process runtime).
	Images *images.Store
	// ImageImportDir holds image archives (docker save or OCI) imported
	// into Images at start, as k3s imports its agent/images; "" for none.
	// Static pods start meanwhile, API pods once it is done.
	ImageImportDir string
	// InsecureRegistries may be pulled from over plain HTTP besides those
	// on loopback addresses ("host" or "host:port").
	InsecureRegistries []string
	// Registries is the node's registries file (mirrors, logins, CAs); nil
	// for none.
	Registries *images.Registries
	// PodPidsLimit caps each container's processes and threads (cgroup
	// pids.max), so that one pod's fork bomb cannot exhaust the node's; 0
	// for none.
	PodPidsLimit int64
	// SeccompDefault gives containers that name no seccomp profile the
	// runtime's default one (RuntimeDefault), as the kubelet's
	// --seccomp-default; without it they run Unconfined.
	SeccompDefault bool
	// EvictionHard are the hard eviction thresholds: the Node's pressure
	// conditions, and the evictions that relieve them (ParseEvictionHard;
	// nil for DefaultEvictionHard).
	EvictionHard []evictionapi.Threshold
	// EvictionInterval is how often the node is checked for pressure, as
	// the kubelet's eviction manager (0: every 10s).
	EvictionInterval time.Duration
	// ClusterDNS are the cluster's DNS servers (the kube-dns Service's
	// cluster IP) that ClusterFirst pods resolve with; none makes
	// ClusterFirst fall back to Default, with an event, as the kubelet.
	ClusterDNS []net.IP
	// ClusterDomain is the cluster's DNS domain (cluster.local): pods'
	// search path and subdomains.
	ClusterDomain string
	// LocalStoragePath holds the directories of the node's local volumes
	// (the local-path StorageClasses'), made and removed through the node
	// API; "" for <RootDir>/storage.
	LocalStoragePath string
	// ResolverConfig is the node's resolver file, which Default pods get
	// and ClusterFirst pods' search path extends ("" for none).
	ResolverConfig string
}

// Agent is a running node agent.
type Agent struct {
	opts     Options
	client   kubernetes.Interface
	recorder record.EventRecorder

	mu      sync.Mutex
	workers map[string]*podworker.Worker // namespace/name of API pods; "static/namespace/name" of static pods
	// rejected are the pods admission refused, so that each is refused once.
	rejected  map[types.UID]bool
	wg        sync.WaitGroup
	podLister cache.Store
	// mirrors is podLister with the mirror pods the agent itself wrote
	// layered over it, newer resource version first.
	mirrors    cache.MutationCache
	podsSynced func() bool // whether the API's pods of this node have been listed
	// services are the cluster's Services, for the variables the kubelet
	// gives every container (KUBERNETES_SERVICE_HOST, ...); servicesSynced
	// says whether they have been listed once.
	services       cache.Store
	servicesSynced func() bool
	node           *corev1.Node
	staticWake     chan struct{}
	// local is the node's own record of its pods, served read-only.
	local *localstatus.Store
	// cidrWarned is set once a pod CIDR mismatch was reported.
	cidrWarned atomic.Bool
	// workerNode is the node as its pod workers see it, and what they
	// share.
	workerNode *podworker.Node
	// imported is closed once the import directory's archives are in
	// the store.
	imported chan struct{}
}

var (
	registry    = prometheus.NewRegistry()
	runningPods = prometheus.NewGauge(prometheus.GaugeOpts{Name: "steadyplane_node_running_pods", Help: "Pods the node agent runs."})
	eventsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_node_events_total", Help: "Events the node agent recorded, by reason."}, []string{"reason"})
	// imagesRemoved counts images removed by garbage collection.
	imagesRemoved = prometheus.NewCounter(prometheus.CounterOpts{Name: "steadyplane_node_images_removed_total", Help: "Unused images removed because the image store's filesystem was over 85% full."})
	// pressureEvictions counts pods evicted to relieve node pressure.
	admissionRejections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_node_admission_rejections_total", Help: "Pods the node agent rejected on arrival (a host port held, too little room), by reason."}, []string{"reason"})
	pressureEvictions   = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "steadyplane_node_pressure_evictions_total", Help: "Pods evicted because the node crossed a hard eviction threshold, by signal."}, []string{"signal"})
)

func init() {
	registry.MustRegister(runningPods, peerRoutes, eventsTotal, imagesRemoved, pressureEvictions, admissionRejections, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	registry.MustRegister(kubeletapi.Collectors()...)
	registry.MustRegister(podworker.Collectors()...)
	registry.MustRegister(buildinfo.Collector())
}

// DefaultPodPidsLimit is the processes and threads each container may
// have unless told otherwise, on servers and workers alike.
const DefaultPodPidsLimit = 4096

// RegisterMetrics serves cs with the agent's own metrics: a server's up
// runs its node agent in process, and its other parts (the join
// approver) have no endpoint of their own. Registering one twice is a
// no-op.
func RegisterMetrics(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := registry.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				panic(err)
			}
		}
	}
}

// New returns an agent that talks to the API server with cfg.
func New(cfg *rest.Config, o Options) (*Agent, error) {
	staticpod.AllowPrivileged()
	if o.ResolverConfig != "" {
		if _, err := os.Stat(o.ResolverConfig); err != nil {
			// As before there was a resolver file: pods get an empty one,
			// not a configuration error each.
			klog.ErrorS(err, "The node's resolver file cannot be read; pods with dnsPolicy Default get no nameserver", "resolvConf", o.ResolverConfig)
			o.ResolverConfig = ""
		}
	}
	if o.NodeName == "" {
		return nil, errors.New("a node name is required")
	}
	if net.ParseIP(o.NodeIP) == nil {
		return nil, fmt.Errorf("--node-ip=%q is not an IP address", o.NodeIP)
	}
	if err := checkLoopback(o.MetricsAddress); err != nil {
		return nil, err
	}
	if o.APIAddress != "" {
		if _, port, err := net.SplitHostPort(o.APIAddress); err != nil || port == "0" {
			return nil, fmt.Errorf("node API address %q: want host:port with a fixed port, which the Node publishes", o.APIAddress)
		}
	}
	if o.RootDir == "" {
		return nil, errors.New("a root directory is required")
	}
	if o.Runtime == nil {
		return nil, errors.New("a container runtime is required")
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = 10 * time.Second
	}
	if o.EvictionInterval <= 0 {
		o.EvictionInterval = 10 * time.Second
	}
	if o.EvictionHard == nil {
		ths, err := ParseEvictionHard(DefaultEvictionHard)
		if err != nil {
			return nil, err
		}
		o.EvictionHard = ths
	}
	cfg = rest.CopyConfig(cfg)
	// The kubelet's limits: client-go's default of 5 QPS would delay status
	// writes (and so readiness) by hundreds of milliseconds under load.
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "steadyplane-node/" + o.NodeName
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	a := &Agent{opts: o, client: client, workers: map[string]*podworker.Worker{}, local: localstatus.NewStore(), rejected: map[types.UID]bool{}}
	a.workerNode = &podworker.Node{Name: o.NodeName, IP: o.NodeIP, Runtime: o.Runtime, Network: o.Network, RootDir: o.RootDir,
		StopPodsOnExit: o.StopPodsOnExit, PodPidsLimit: o.PodPidsLimit, SeccompDefault: o.SeccompDefault, ClusterDomain: o.ClusterDomain,
		Allocatable: a.allocatable(), Volumes: volume.ClientSource{Client: client}, Local: a.local}
	if o.Images != nil {
		a.workerNode.Images = podworker.NewImageService(&images.Puller{Store: o.Images, InsecureRegistries: o.InsecureRegistries, Registries: o.Registries,
			Unpack: images.UnpackOptions{Rootless: os.Geteuid() != 0}})
	}
	return a, nil
}

// Run runs static pods at once, without waiting for an API server, and
// in the background registers the Node and runs the API's pods once an API
// server answers (retried with backoff); mirror pods follow then. Static
// pods keep running while the API server is away. When ctx ends it stops
// every container (SIGTERM, SIGKILL after the pod's grace period) and
// returns.
func (a *Agent) Run(ctx context.Context) error {
	if err := os.MkdirAll(a.opts.RootDir, 0o700); err != nil {
		return err
	}
	// Events wait in the broadcaster until an API server takes them. It
	// outlives ctx until the pods have stopped: their Killing events are
	// what a user reads about the stop.
	events, stopEvents := context.WithCancel(context.WithoutCancel(ctx))
	broadcaster := record.NewBroadcaster(record.WithContext(events))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	defer func() {
		broadcaster.Shutdown()
		stopEvents()
	}()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "steadyplane-node", Host: a.opts.NodeName})
	a.recorder = recorder
	a.workerNode.DNS = dns.NewConfigurer(recorder, &corev1.ObjectReference{Kind: "Node", Name: a.opts.NodeName, UID: types.UID(a.opts.NodeName)},
		[]net.IP{net.ParseIP(a.opts.NodeIP)}, a.opts.ClusterDNS, a.opts.ClusterDomain, a.opts.ResolverConfig)
	a.workerNode.DNS.CheckLimitsForResolvConf(klog.FromContext(ctx))

	a.staticWake = make(chan struct{}, 1)
	a.imported = make(chan struct{})
	go a.importImages()
	// Patient: the API server restarts up to three times in seconds when a
	// revision of it falls back, and a plain reflector would then not see
	// new pods (the next installer) for up to a minute.
	lw := patient.ListerWatcher(ctx, cache.NewListWatchFromClient(a.client.CoreV1().RESTClient(), "pods", metav1.NamespaceAll,
		fields.OneTermEqualSelector("spec.nodeName", a.opts.NodeName)), patient.DefaultOptions)
	indexer, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { a.podChanged(ctx, obj) },
			UpdateFunc: func(_, obj any) { a.podChanged(ctx, obj) },
			DeleteFunc: func(obj any) { a.podDeleted(obj) },
		},
	})
	a.podLister, a.podsSynced = indexer, informer.HasSynced
	services, servicesInformer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: patient.ListerWatcher(ctx, cache.NewListWatchFromClient(a.client.CoreV1().RESTClient(), "services", metav1.NamespaceAll, fields.Everything()), patient.DefaultOptions),
		ObjectType:    &corev1.Service{},
		Handler:       cache.ResourceEventHandlerFuncs{}, // read when a container starts
	})
	a.services, a.servicesSynced = services, servicesInformer.HasSynced
	a.mirrors = cache.NewIntegerResourceVersionMutationCache(klog.FromContext(ctx), indexer, nil, mirrorMutationTTL, true)
	if a.opts.APIAddress != "" {
		api, err := kubeletapi.New(kubeletapi.Options{Address: a.opts.APIAddress, CertFile: a.opts.TLSCertFile, KeyFile: a.opts.TLSKeyFile,
			ClientCAFile: a.opts.ClientCAFile, NodeName: a.opts.NodeName, Client: a.client,
			Metrics: promhttp.HandlerFor(registry, promhttp.HandlerOpts{}), ReleaseDir: releaseDir(),
			LocalVolumes: localpath.Store{Root: a.localStoragePath()}, Stats: &stats.Provider{Read: a.statsSample}}, nodeAPIHost{a})
		if err != nil {
			return err
		}
		go api.Serve(ctx)
	}
	if a.opts.MetricsAddress != "" {
		go a.serveMetrics(ctx)
	}
	if a.opts.PodManifestPath != "" {
		go a.runStaticPods(ctx)
	}
	go a.runWithAPI(ctx, informer, servicesInformer)
	klog.InfoS("Node agent running", "node", a.opts.NodeName, "nodeIP", a.opts.NodeIP, "rootDir", a.opts.RootDir)
	<-ctx.Done()
	if a.opts.StopPodsOnExit {
		klog.InfoS("Node agent stopping: stopping every container")
	} else {
		klog.InfoS("Node agent stopping: containers keep running (--stop-pods-on-exit=false)")
	}
	a.wg.Wait()
	return nil
}

// apiBackoff spaces the attempts to register the Node while no API server
// answers: 1s doubling to 30s.
var apiBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}

// runWithAPI registers the Node, retrying until an API server answers, then
// starts the heartbeat, the Lease and the informer of the node's pods.
func (a *Agent) runWithAPI(ctx context.Context, informer, servicesInformer cache.Controller) {
	registered := podworker.RetryUntilDone(ctx, apiBackoff, func(ctx context.Context) bool {
		err := a.registerNode(ctx)
		if err != nil {
			klog.InfoS("No API server yet; static pods run meanwhile, registration is retried", "err", err)
		}
		return err == nil
	})
	if !registered {
		return
	}
	klog.InfoS("Node registered", "node", a.opts.NodeName)
	go a.heartbeat(ctx)
	go wait.UntilWithContext(ctx, a.evictUnderPressure, a.opts.EvictionInterval)
	if a.opts.Images != nil {
		go wait.UntilWithContext(ctx, a.collectImages, imageGCPeriod)
	}
	leases := lease.NewController(clock.RealClock{}, a.client, a.opts.NodeName, 40, nil, 10*time.Second, a.opts.NodeName, corev1.NamespaceNodeLease, a.setLeaseOwner)
	go leases.Run(ctx)
	if a.opts.Network != nil {
		go a.routePeers(ctx)
	}
	go servicesInformer.RunWithContext(ctx)
	// The containers of API pods get the Services' variables: the pods
	// are listed once the Services have been (a few objects, one request),
	// and once the import directory's images are in the store.
	if !cache.WaitForCacheSync(ctx.Done(), servicesInformer.HasSynced) {
		return
	}
	select {
	case <-a.imported:
	case <-ctx.Done():
		return
	}
	go informer.RunWithContext(ctx)
	if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		a.wakeStatic() // the mirror pods can be written now
	}
}

func (a *Agent) serveMetrics(ctx context.Context) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	a.local.Register(mux)
	if err := metricsserver.Serve(ctx, a.opts.MetricsAddress, mux); err != nil {
		klog.ErrorS(err, "Serving node agent metrics", "address", a.opts.MetricsAddress)
	}
}

// checkLoopback refuses a read-only address that is not on a loopback
// address: it answers without authentication.
func checkLoopback(address string) error {
	if address == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address=%q: %v", address, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--metrics-bind-address=%q: the read-only endpoint answers without authentication, so it listens on a loopback address only (e.g. 127.0.0.1:10255)", address)
	}
	return nil
}

// releaseDir is where the binaries this node installed are, served to the
// nodes that move to one of them: the directory of the installed copy the
// agent runs, "" when it runs another file (go run, a test's build).
// localStoragePath is where the node's local volumes are.
func (a *Agent) localStoragePath() string {
	if a.opts.LocalStoragePath != "" {
		return a.opts.LocalStoragePath
	}
	return filepath.Join(a.opts.RootDir, "storage")
}

func releaseDir() string {
	self, err := os.Executable()
	if err != nil || !strings.HasPrefix(filepath.Base(self), binary.Prefix) {
		return ""
	}
	return filepath.Dir(self)
}
