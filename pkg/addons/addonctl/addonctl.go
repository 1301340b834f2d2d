// Package addonctl runs the controllers of the cluster's add-ons
// ("steadyplane addon-controllers"): every server runs one process, and
// one of them, holding a Lease, runs the controllers (load balancers on
// node addresses, package servicelb), so that a server's death hands them
// over within the lease, as the controller manager's do. It runs the
// local-path provisioner (package localpath) too.
package addonctl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	provisioncontroller "sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
	provisionmetrics "sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller/metrics"

	"github.com/steadyplane/steadyplane/pkg/addons/localpath"
	"github.com/steadyplane/steadyplane/pkg/addons/servicelb"
	"github.com/steadyplane/steadyplane/pkg/buildinfo"
	"github.com/steadyplane/steadyplane/pkg/leader"
	"github.com/steadyplane/steadyplane/pkg/metricsserver"
	"github.com/steadyplane/steadyplane/pkg/rbacutil"
)

// The controllers, by the names --controllers and up's --disable use (as
// k3s names them).
const (
	// ServiceLB gives LoadBalancer Services the Ready nodes' addresses.
	ServiceLB = "servicelb"
	// LocalStorage provisions node-local volumes for the local-path
	// StorageClasses.
	LocalStorage = "local-storage"
)

// Known lists the controllers this release has.
var Known = []string{LocalStorage, ServiceLB}

// Options configure the add-on controllers.
type Options struct {
	// Controllers are the controllers to run, of Known.
	Controllers []string
	// Identity, when set, runs the controllers only while this process
	// holds the Lease kube-system/LeaseName under this name; empty runs
	// them without a lease (one process per cluster).
	Identity string
	// MetricsAddress serves Prometheus metrics; "" for none.
	MetricsAddress string
	// Reserved are steadyplane's own ports on nodes' addresses, which no
	// load balancer may take.
	Reserved []servicelb.Reserved
	// NodeSelector, when not nil, limits load balancers to these nodes.
	NodeSelector labels.Selector
	// NodeAPICAFile is the CA of the nodes' API serving certificates: the
	// local-path provisioner asks nodes for volume directories there.
	NodeAPICAFile string
}

// Validate says what is wrong with o.
func (o Options) Validate() error {
	for _, c := range o.Controllers {
		if !slices.Contains(Known, c) {
			return fmt.Errorf("--controllers: %q is not one of %s", c, strings.Join(Known, ", "))
		}
	}
	if len(o.Controllers) == 0 {
		return fmt.Errorf("--controllers: none given (of %s)", strings.Join(Known, ", "))
	}
	if slices.Contains(o.Controllers, LocalStorage) && o.NodeAPICAFile == "" {
		return errors.New("--node-api-ca-file is required by " + LocalStorage + ": it reaches the nodes' API")
	}
	return nil
}

// LeaseName is the Lease in kube-system the servers' processes take turns
// holding.
const LeaseName = "steadyplane-addon-controllers"

// User is the identity the process runs as.
const User = "steadyplane:addon-controllers"

// roleName names the roles and their bindings.
const roleName = "steadyplane:addon-controllers"

// Run runs the controllers until ctx ends or one fails.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildinfo.Collector())
	errs := make(chan error, 2)
	metricsserver.Start(ctx, o.MetricsAddress, reg, errs)

	var runs []func(context.Context) error
	if slices.Contains(o.Controllers, ServiceLB) {
		lb := &servicelb.Controller{Client: client, Reserved: o.Reserved, NodeSelector: o.NodeSelector, Metrics: servicelb.NewMetrics(reg),
			Recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "steadyplane-servicelb"})}
		runs = append(runs, lb.Run)
	}
	if slices.Contains(o.Controllers, LocalStorage) {
		run, err := localStorage(ctx, client, cfg, o, reg)
		if err != nil {
			return err
		}
		runs = append(runs, run)
	}
	work := func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, len(runs))
		for _, r := range runs {
			go func() { done <- r(ctx) }()
		}
		err := <-done
		cancel()
		for range len(runs) - 1 {
			<-done
		}
		return err
	}
	finished := make(chan error, 1)
	if o.Identity == "" {
		go func() { finished <- work(ctx) }()
	} else {
		lock, err := leader.Lease(client, metav1.NamespaceSystem, LeaseName, o.Identity)
		if err != nil {
			return err
		}
		log := slog.New(logr.ToSlogHandler(klog.Background()))
		go func() { finished <- leader.Run(ctx, lock, log, work, nil) }()
	}
	select {
	case err := <-finished:
		return err
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	// Stopping: the work ends (a provision in flight finishes or fails)
	// and the Lease is handed back, so that another server's process takes
	// over at once, not after the lease runs out.
	select {
	case err := <-finished:
		return err
	case <-time.After(45 * time.Second):
		return errors.New("the controllers did not stop within 45s")
	}
}

// localStorage makes the local-path provisioner: the upstream library's
// controller without its own election (Run holds the Lease), its metrics
// in reg, asking nodes for directories over their API with this
// process's client certificate.
func localStorage(ctx context.Context, client kubernetes.Interface, cfg *rest.Config, o Options, reg prometheus.Registerer) (func(context.Context) error, error) {
	// Only the certificate of cfg: the nodes' API is no API server, and
	// its certificates are of their own CA. Files are read again when
	// up renews them.
	nodeCfg := &rest.Config{Timeout: 30 * time.Second, TLSClientConfig: rest.TLSClientConfig{
		CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, CertData: cfg.CertData, KeyData: cfg.KeyData, CAFile: o.NodeAPICAFile}}
	httpClient, err := rest.HTTPClientFor(nodeCfg)
	if err != nil {
		return nil, fmt.Errorf("the nodes' API: %w", err)
	}
	p := &localpath.Provisioner{HTTP: httpClient, Node: func(ctx context.Context, name string) (*corev1.Node, error) {
		return client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}}
	m := provisionmetrics.New("steadyplane_local_path")
	reg.MustRegister(m.PersistentVolumeClaimProvisionTotal, m.PersistentVolumeClaimProvisionFailedTotal, m.PersistentVolumeClaimProvisionDurationSeconds,
		m.PersistentVolumeDeleteTotal, m.PersistentVolumeDeleteFailedTotal, m.PersistentVolumeDeleteDurationSeconds)
	// Made once, before any informer or the elector decodes anything: the
	// library adds its types to client-go's scheme as it is made, which
	// nothing may read meanwhile. Its queues are for one run, so a process
	// that lost the Lease exits to lead again afresh (the node agent
	// starts it again).
	ctrl := provisioncontroller.NewProvisionController(ctx, client, localpath.ProvisionerName, p,
		provisioncontroller.LeaderElection(false), provisioncontroller.MetricsInstance(m),
		// Claims and released volumes are retried for ever, a second
		// first and a minute apart at most: a node that is down for a
		// while (an upgrade) is not given up on.
		provisioncontroller.FailedProvisionThreshold(0), provisioncontroller.FailedDeleteThreshold(0),
		provisioncontroller.RateLimiter(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, time.Minute)),
		provisioncontroller.AddFinalizer(true))
	var workers sync.WaitGroup
	ctrl.ControllerWaitGroup(&workers)
	var ran atomic.Bool
	return func(ctx context.Context) error {
		if ran.Swap(true) {
			return errors.New(LocalStorage + ": leading again after a lost Lease; exiting to start afresh")
		}
		ctrl.Run(ctx)
		workers.Wait()
		return nil
	}, nil
}

// ClusterRole is what the controllers do: watch Services, Nodes, Pods
// (their hostPorts) and EndpointSlices, write Services' status, and say
// why in Events; provision PersistentVolumes for claims of the local-path
// classes (the claim's annotations, the volume's finalizer), and ask
// nodes for their directories (nodes/volumes on the node API).
func ClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: roleName, Labels: rbacutil.ManagedBy},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "pods"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"update"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "update"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/volumes"}, Verbs: []string{"create", "delete"}},
		},
	}
}

// LeaseRole lets the servers' processes take turns at their Lease, and
// touch no other.
func LeaseRole() *rbacv1.Role { return rbacutil.LeaseRole(roleName, LeaseName) }

// EnsureRBAC creates the roles and bindings, or brings them back to what
// they must be, with a client that may (the cluster's admin).
func EnsureRBAC(ctx context.Context, client kubernetes.Interface) error {
	return rbacutil.Ensure(ctx, client, ClusterRole(), rbacutil.UserBinding(roleName, "", User),
		LeaseRole(), rbacutil.UserBinding(roleName, metav1.NamespaceSystem, User))
}
