// Package readinessgates runs Pod Ready++ "feature integration" for a
// cluster ("steadyplane readiness-controller"): the mutating webhook that
// injects readiness gates (package webhook), and the controller of the
// steadyplane.io/load-balancer-ready gate (package lbgate, on conditionctl).
package readinessgates

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/steadyplane/steadyplane/pkg/buildinfo"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/leader"
	"github.com/steadyplane/steadyplane/pkg/metricsserver"
	"github.com/steadyplane/steadyplane/pkg/pki"
	"github.com/steadyplane/steadyplane/pkg/readinessgates/conditionctl"
	"github.com/steadyplane/steadyplane/pkg/readinessgates/lbgate"
	"github.com/steadyplane/steadyplane/pkg/readinessgates/webhook"
)

// Options configure the readiness controller.
type Options struct {
	// WebhookAddress is where the webhook listens (host:port).
	WebhookAddress string
	// WebhookURL is the URL the API server calls; empty means
	// https://<WebhookAddress>/mutate.
	WebhookURL string
	// CertFile and KeyFile are the webhook's serving certificate; CAFile is
	// the CA that signed it, given to the API server as the caBundle.
	CertFile, KeyFile, CAFile string
	// MetricsAddress serves Prometheus metrics; "" for none.
	MetricsAddress string
	// CheckInterval is how often each gated pod whose target is healthy is
	// checked again; one that is not is checked every 500ms.
	CheckInterval time.Duration
	// PodCIDRs are the cluster's pod ranges: the only addresses (with
	// hostNetwork pods' node addresses) the load-balancer gate checks.
	PodCIDRs []*net.IPNet
	// ProxyHealthzPort, when not 0, makes the load-balancer gate require
	// the data path too: before the condition turns True, every Ready
	// node's kube-proxy (its /healthz at the node's InternalIP and this
	// port) must have synced its rules since the pod's EndpointSlices
	// last changed (lbgate.DataPathCheck).
	ProxyHealthzPort int
	// Identity, when set, runs the gate's controller only while this
	// process holds the Lease kube-system/LeaseName under this name: every
	// server of a cluster runs a readiness controller (its API server calls
	// its own webhook), one of them sets the conditions. Empty runs the
	// controller without a lease.
	Identity string
}

// LeaseName is the Lease in kube-system that the readiness controllers of
// a cluster's servers take turns holding.
const LeaseName = "steadyplane-readiness-controller"

// Run serves the webhook, registers it, and runs the load-balancer gate
// controller until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	// Renewed by up while the controller runs: read again when it changes.
	pair, err := pki.LoadServingPair(o.CertFile, o.KeyFile)
	if err != nil {
		return fmt.Errorf("webhook serving certificate: %w", err)
	}
	caBundle, err := os.ReadFile(o.CAFile)
	if err != nil {
		return fmt.Errorf("--ca-file: %w", err)
	}
	if _, _, err := net.SplitHostPort(o.WebhookAddress); err != nil {
		return fmt.Errorf("--webhook-bind-address=%q: %w", o.WebhookAddress, err)
	}
	if len(o.PodCIDRs) == 0 {
		return errors.New("--pod-cidr is required: the load-balancer gate checks only addresses in the cluster's pod network")
	}
	if o.WebhookURL == "" {
		o.WebhookURL = webhook.URL(o.WebhookAddress)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	namespaces := factory.Core().V1().Namespaces()
	synced := []cache.InformerSynced{namespaces.Informer().HasSynced}
	var dataPath *lbgate.DataPathCheck
	if o.ProxyHealthzPort != 0 {
		dataPath = &lbgate.DataPathCheck{ProxyHealthzPort: o.ProxyHealthzPort, Client: lbgate.HTTPClient()}
		more, err := dataPath.Start(factory)
		if err != nil {
			return err
		}
		synced = append(synced, more...)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	handler := &webhook.Handler{Namespace: func(ctx context.Context, name string) (*corev1.Namespace, error) {
		return namespaces.Lister().Get(name)
	}}

	errs := make(chan error, 3)
	go func() { errs <- webhook.Serve(ctx, o.WebhookAddress, pair.GetCertificate, handler) }()
	if err := waitServing(ctx, o.WebhookAddress, caBundle); err != nil {
		return err
	}
	if err := webhook.Register(ctx, client, o.WebhookURL, caBundle); err != nil {
		return err
	}
	klog.InfoS("Readiness-gate webhook registered", "url", o.WebhookURL, "namespaceLabel", webhook.PolicyKey)

	reg := prometheus.NewRegistry()
	reg.MustRegister(buildinfo.Collector())
	conditionctl.RegisterMetrics(reg)
	metricsserver.Start(ctx, o.MetricsAddress, reg, errs)
	if err := runGate(ctx, client, o, dataPath, errs); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}

// runGate runs the controller of the load-balancer gate in the
// background, while this process holds the Lease when o names an
// identity; errs gets why it stopped.
func runGate(ctx context.Context, client kubernetes.Interface, o Options, dataPath *lbgate.DataPathCheck, errs chan<- error) error {
	httpClient := lbgate.HTTPClient()
	ctl := &conditionctl.Controller{
		Client: client, ConditionType: lbgate.ConditionType, Interval: o.CheckInterval,
		Check: func(ctx context.Context, pod *corev1.Pod) conditionctl.Result {
			r := lbgate.Check(ctx, httpClient, pod, o.PodCIDRs)
			if dataPath != nil {
				r = dataPath.Check(ctx, pod, r)
			}
			return r
		},
	}
	if o.Identity == "" {
		go func() { errs <- ctl.Run(ctx) }()
		return nil
	}
	lock, err := leader.Lease(client, metav1.NamespaceSystem, LeaseName, o.Identity)
	if err != nil {
		return err
	}
	log := slog.New(logr.ToSlogHandler(klog.Background()))
	go func() { errs <- leader.Run(ctx, lock, log, ctl.Run, nil) }()
	return nil
}

// waitServing waits until this process's webhook answers /healthz on addr
// with a certificate of caBundle's CA (webhook.Healthy): the API server is
// told about it only then, and a port that some other program holds is
// not taken for it.
func waitServing(ctx context.Context, addr string, caBundle []byte) error {
	var err error
	for i := 0; i < 100; i++ {
		if err = webhook.Healthy(ctx, addr, caBundle); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("the webhook does not serve on %s: %w", addr, err)
}
