package main

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/readinessgates"
)

func newReadinessControllerCommand() *cobra.Command {
	o := readinessgates.Options{WebhookAddress: "127.0.0.1:9443"}
	var kubeconfig string
	var podCIDRs []string
	leaderElect := false
	o.Identity, _ = os.Hostname()
	cmd := &cobra.Command{
		Use:   "readiness-controller",
		Short: "Inject readiness gates into pods and run the load-balancer-ready gate",
		Long: `Run Pod Ready++ feature integration for the cluster:

- a mutating admission webhook (registered as MutatingWebhookConfiguration
  steadyplane-readiness-gates, failurePolicy Ignore) that adds readiness gates to pods
  created in namespaces labelled steadyplane.io/readiness-gates: the gates listed in the
  namespace's annotation of the same name (comma-separated), or
  steadyplane.io/load-balancer-ready;
- the controller of steadyplane.io/load-balancer-ready: True while
  GET http://<podIP>:<port><path> answers 2xx/3xx, with port and path from the pod's
  annotations steadyplane.io/load-balancer-port and steadyplane.io/load-balancer-path
  (default: the first containerPort, "/"), for pods whose address is in --pod-cidr
  (or hostNetwork pods on their node's address): no other pod address is ever checked.
  With --proxy-healthz-port, the condition turns True only once, in addition, every Ready
  node's kube-proxy has synced its rules after the EndpointSlices of the pod's Services
  listed it (reason ProxyNotSynced or EndpointsPending until then).

Every server of a cluster runs one ("up" does): the webhook is registered at
https://127.0.0.1:<port>/mutate, so that each API server calls the one on its own host,
and with --leader-elect the gate's controller runs only while it holds the Lease
kube-system/steadyplane-readiness-controller (--identity): one server sets
the conditions, another takes over within 15 s when it dies.`,
		Example: `  steadyplane readiness-controller --kubeconfig admin.kubeconfig \
    --tls-cert-file webhook.crt --tls-private-key-file webhook.key --ca-file ca.crt --pod-cidr 10.244.0.0/16
  kubectl label namespace team steadyplane.io/readiness-gates=on`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			// Both client options: fail over between API servers, wait out
			// one that is initializing.
			cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{AltSvc: altsvcclient.Options{CacheDir: ""}})
			if err != nil {
				return err
			}
			for _, c := range podCIDRs {
				_, n, err := net.ParseCIDR(c)
				if err != nil {
					return fmt.Errorf("--pod-cidr=%q: %w", c, err)
				}
				o.PodCIDRs = append(o.PodCIDRs, n)
			}
			if !leaderElect {
				o.Identity = ""
			} else if o.Identity == "" {
				return fmt.Errorf("--identity: this host has no name; give one, or --leader-elect=false")
			}
			return readinessgates.Run(ctx, cfg, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig; needs to watch pods and namespaces, patch pods/status and write MutatingWebhookConfigurations.")
	fs.StringVar(&o.WebhookAddress, "webhook-bind-address", o.WebhookAddress, "Address the webhook serves HTTPS on.")
	fs.StringVar(&o.WebhookURL, "webhook-url", o.WebhookURL, "URL the API server calls; default https://<webhook-bind-address>/mutate.")
	fs.StringVar(&o.CertFile, "tls-cert-file", o.CertFile, "Webhook serving certificate.")
	fs.StringVar(&o.KeyFile, "tls-private-key-file", o.KeyFile, "Webhook serving key.")
	fs.StringVar(&o.CAFile, "ca-file", o.CAFile, "CA of the serving certificate, given to the API server as the webhook's caBundle.")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "Address for Prometheus metrics; empty for none.")
	fs.DurationVar(&o.CheckInterval, "check-interval", 5*time.Second, "How often each gated pod whose target is healthy is checked again; one that is not yet is checked every 500ms.")
	fs.IntVar(&o.ProxyHealthzPort, "proxy-healthz-port", 0, "When set, steadyplane.io/load-balancer-ready also waits for the data path: every Ready node's kube-proxy (its /healthz at the node's InternalIP and this port) must have synced its rules since the pod's EndpointSlices last changed. 0: the direct check alone.")
	fs.StringSliceVar(&podCIDRs, "pod-cidr", nil, "The cluster's pod ranges (comma-separated): the load-balancer gate checks only pod addresses in them, and hostNetwork pods on their node's address; no other pod address is ever dialled (--proxy-healthz-port adds kube-proxy at each Node's InternalIP).")
	fs.BoolVar(&leaderElect, "leader-elect", leaderElect, "Set the gate's conditions only while holding the Lease kube-system/"+readinessgates.LeaseName+" (every server of a cluster runs a readiness controller and serves the webhook to its own API server; one sets the conditions; up turns it on). Needs create, get and update on that Lease (readinessgates.LeaseRole).")
	fs.StringVar(&o.Identity, "identity", o.Identity, "This controller's name in the Lease (up gives its node's name); default the host name.")
	for _, f := range []string{"kubeconfig", "tls-cert-file", "tls-private-key-file", "ca-file", "pod-cidr"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}
