// Package addonctl runs the controllers of the cluster's add-ons
// ("steadyplane addon-controllers"): every server runs one process, and
// one of them, holding a Lease, runs the controllers (load balancers on
// node addresses, package servicelb), so that a server's death hands them
// over within the lease, as the controller manager's do.
package addonctl

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

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
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/addons/servicelb"
	"github.com/steadyplane/steadyplane/pkg/buildinfo"
	"github.com/steadyplane/steadyplane/pkg/leader"
	"github.com/steadyplane/steadyplane/pkg/metricsserver"
	"github.com/steadyplane/steadyplane/pkg/rbacutil"
)

// The controllers, by the names --controllers and up's --disable use.
const (
	// ServiceLB gives LoadBalancer Services the Ready nodes' addresses.
	ServiceLB = "servicelb"
)

// Known lists the controllers this release has.
var Known = []string{ServiceLB}

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
	if o.Identity == "" {
		go func() { errs <- work(ctx) }()
	} else {
		lock, err := leader.Lease(client, metav1.NamespaceSystem, LeaseName, o.Identity)
		if err != nil {
			return err
		}
		log := slog.New(logr.ToSlogHandler(klog.Background()))
		go func() { errs <- leader.Run(ctx, lock, log, work, nil) }()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}

// ClusterRole is what the controllers do: watch Services, Nodes, Pods
// (their hostPorts) and EndpointSlices, write Services' status, and say
// why in Events.
func ClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: roleName, Labels: rbacutil.ManagedBy},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "nodes", "pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"update", "patch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
		},
	}
}

// LeaseRole lets the servers' processes take turns at their Lease, and
// touch no other.
func LeaseRole() *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: roleName, Namespace: metav1.NamespaceSystem, Labels: rbacutil.ManagedBy},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{LeaseName}, Verbs: []string{"get", "update"}},
		},
	}
}

// EnsureRBAC creates the roles and bindings, or brings them back to what
// they must be, with a client that may (the cluster's admin).
func EnsureRBAC(ctx context.Context, client kubernetes.Interface) error {
	return rbacutil.Ensure(ctx, client, ClusterRole(), rbacutil.UserBinding(roleName, "", User),
		LeaseRole(), rbacutil.UserBinding(roleName, metav1.NamespaceSystem, User))
}
