package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/steadyplane/steadyplane/pkg/addons/addonctl"
	"github.com/steadyplane/steadyplane/pkg/addons/localpath"
	"github.com/steadyplane/steadyplane/pkg/addons/servicelb"
	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/node/kubeletapi"
)

func newAddonControllersCommand() *cobra.Command {
	o := addonctl.Options{Controllers: addonctl.Known}
	var kubeconfig, nodeSelector string
	var reserved, reservedOnServers []string
	leaderElect := false
	o.Identity, _ = os.Hostname()
	cmd := &cobra.Command{
		Use:   "addon-controllers",
		Short: "Run the add-ons' controllers: local volumes, load balancers on the nodes' addresses",
		Long: `Run the controllers of the cluster's add-ons:

- local-storage: claims of the StorageClasses whose provisioner is
  ` + localpath.ProvisionerName + ` ("up" makes ` + localpath.DefaultClassName + `, the default class, reclaim Delete,
  and ` + localpath.RetainClassName + `, reclaim Retain; both WaitForFirstConsumer) get a local
  PersistentVolume on the node the scheduler chose for their first pod: a directory the
  node agent makes under its --local-storage-path when asked over the node API
  (POST/DELETE ` + kubeletapi.LocalVolumesPath + `<pv>, authorized as nodes/volumes; --node-api-ca-file verifies
  the node), bound to that node by node affinity, of the claim's requested size (not
  enforced). A Delete volume's directory is removed with it once released.

- servicelb: a Service of type LoadBalancer (with no spec.loadBalancerClass, or
  ` + servicelb.ClassName + `) gets the InternalIPs of the Ready nodes in
  status.loadBalancer.ingress, and kube-proxy on every node sends traffic to those
  addresses on the Service's ports to its endpoints. A node is left out when one of
  the Service's ports is already taken on its address: by an older LoadBalancer
  Service, a Service's node port or external IP, a pod's hostPort, or steadyplane's
  own listeners (the node API, --reserved-port, --reserved-server-port). The Service's
  condition ` + servicelb.ConditionType + ` says which nodes serve it and why others
  do not, with an Event (PortConflict, NoReadyNodes, NoLocalEndpoints). Nodes labelled
  ` + servicelb.ExcludeLabel + ` never carry one; with
  externalTrafficPolicy Local only nodes that run a ready endpoint do.

Every server of a cluster runs one ("up" does, unless --disable names all of them);
with --leader-elect the controllers run only while this process holds the Lease
kube-system/` + addonctl.LeaseName + `, and another server's takes over within 15 s.`,
		Example: `  steadyplane addon-controllers --kubeconfig addons.kubeconfig --leader-elect \
    --reserved-port node-api=10250/TCP --reserved-server-port apiserver=6443/TCP`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			var err error
			if o.Reserved, err = parseReserved(reserved, false); err != nil {
				return fmt.Errorf("--reserved-port: %w", err)
			}
			more, err := parseReserved(reservedOnServers, true)
			if err != nil {
				return fmt.Errorf("--reserved-server-port: %w", err)
			}
			o.Reserved = append(o.Reserved, more...)
			if nodeSelector != "" {
				if o.NodeSelector, err = labels.Parse(nodeSelector); err != nil {
					return fmt.Errorf("--servicelb-node-selector=%q: %w", nodeSelector, err)
				}
			}
			if !leaderElect {
				o.Identity = ""
			} else if o.Identity == "" {
				return fmt.Errorf("--identity: this host has no name; give one, or --leader-elect=false")
			}
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{AltSvc: altsvcclient.Options{CacheDir: ""}})
			if err != nil {
				return err
			}
			return addonctl.Run(ctx, cfg, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig; needs the ClusterRole "+addonctl.User+" (up grants it).")
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, "The controllers to run, of: "+strings.Join(addonctl.Known, ", ")+".")
	fs.StringArrayVar(&reserved, "reserved-port", nil, "A port steadyplane listens on at every node's address, as name=port/protocol (e.g. kube-proxy-healthz=10256/TCP); no load balancer takes it (repeatable). The node API's port is read from each Node.")
	fs.StringArrayVar(&reservedOnServers, "reserved-server-port", nil, "Like --reserved-port, on servers' Nodes only (labelled "+servicelb.ServerLabel+"): the API server's and etcd's ports.")
	fs.StringVar(&o.NodeAPICAFile, "node-api-ca-file", "", "CA of the nodes' API serving certificates (local-storage reaches the nodes there).")
	fs.StringVar(&nodeSelector, "servicelb-node-selector", "", "Label selector of the nodes whose addresses load balancers get (default: every Ready node).")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", "", "Address for Prometheus metrics; empty for none.")
	fs.BoolVar(&leaderElect, "leader-elect", leaderElect, "Run the controllers only while holding the Lease kube-system/"+addonctl.LeaseName+" (every server runs this process; up turns it on).")
	fs.StringVar(&o.Identity, "identity", o.Identity, "This process's name in the Lease (up gives its node's name); default the host name.")
	_ = cmd.MarkFlagRequired("kubeconfig")
	return cmd
}

// parseReserved reads name=port/protocol pairs.
func parseReserved(pairs []string, serversOnly bool) ([]servicelb.Reserved, error) {
	var out []servicelb.Reserved
	for _, p := range pairs {
		name, port, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q is not name=port/protocol", p)
		}
		parsed, err := servicelb.ParsePort(port)
		if err != nil {
			return nil, err
		}
		out = append(out, servicelb.Reserved{Port: parsed, Holder: name, ServersOnly: serversOnly})
	}
	return out, nil
}
