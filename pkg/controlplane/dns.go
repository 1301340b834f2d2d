package controlplane

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/steadyplane/steadyplane/pkg/addons/apply"
	"github.com/steadyplane/steadyplane/pkg/addons/coredns"
	"github.com/steadyplane/steadyplane/pkg/join"
	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// prepareDNS decides the cluster's DNS (package coredns): its Service
// address and domain for the node agent and the node's resolver file.
// Without the pieces it needs (a pod network, kube-proxy, the controllers)
// it says so and leaves DNS out. Its image is added to the node's store
// later, off the path to the API server (startAddonImage).
func (cp *ControlPlane) prepareDNS() error {
	if !cp.opts.DNS || slices.Contains(cp.opts.Disable, coredns.Name) || cp.Node == nil {
		return nil
	}
	if why := coredns.Missing(coredns.Needs{PodNetwork: cp.nodeRuntime == "runc", Proxy: cp.Proxy != nil,
		Controllers: cp.ControllerManager != nil, Advertise: cp.addr.advertise}); why != "" {
		cp.progressf("WARNING: no cluster DNS: %s", why)
		return nil
	}
	plan, note, err := coredns.PlanServer(coredns.Server{ServiceCIDR: cp.opts.ServiceCIDR, Domain: cp.opts.ClusterDomain,
		ResolvConf: cp.opts.ResolvConf, Advertise: cp.addr.advertise, APIServerPort: cp.opts.APIServerPort})
	if err != nil {
		return err
	}
	if note != "" {
		cp.progressf("cluster DNS: %s", note)
	}
	cp.dns = &plan.Config
	cp.Node.Args = append(cp.Node.Args, plan.NodeArgs()...)
	return nil
}

// startAddonImage adds the image CoreDNS and metrics-server run from (the
// binary the static pods run) to the node agent's image store, in the
// background: the first time it copies a quarter of a gigabyte, which the
// API server does not wait for. waitAddonImage waits for it.
func (cp *ControlPlane) startAddonImage() {
	if (cp.dns == nil && cp.metrics == nil) || cp.addonImage != nil {
		return
	}
	store := images.StoreDir(cp.dir.nodeRoot())
	bin, err := cp.installedBinary()
	if err != nil {
		cp.addonImage = &pending{done: make(chan struct{}), err: err}
		close(cp.addonImage.done)
		return
	}
	cp.addonImage = startPending(func() error {
		s, err := images.Open(store)
		if err != nil {
			return err
		}
		ref, err := s.AddBinary(bin, images.UnpackOptions{Rootless: os.Geteuid() != 0})
		if err != nil {
			return fmt.Errorf("the add-ons' image: %w", err)
		}
		cp.addonImageRef = ref
		return nil
	})
}

// waitAddonImage returns the add-ons' image once it is in the node's
// store.
func (cp *ControlPlane) waitAddonImage(ctx context.Context) (string, error) {
	cp.startAddonImage()
	if err := cp.addonImage.wait(ctx); err != nil {
		return "", err
	}
	return cp.addonImageRef, nil
}

// addonTargets are what an add-on in the API runs from and reaches: its
// image, once in the node's store, and the API servers that serve now
// (what this server saved may hold servers gone since, a cluster reset's
// among them), so that servers of one release that see the same list
// write the same add-ons.
func (cp *ControlPlane) addonTargets(ctx context.Context) (image string, servers []string, err error) {
	if image, err = cp.waitAddonImage(ctx); err != nil {
		return "", nil, err
	}
	client, err := cp.adminClient()
	if err != nil {
		return "", nil, err
	}
	servers = cp.alternatives()
	if live, err := join.ListServers(ctx, client); err == nil && len(live) > 0 && len(servers) > 0 {
		servers = join.MergeServers(servers[0], live) // a joining server may not be listed yet
	}
	return image, servers, nil
}

// applyDNS writes the DNS's objects into the API, once its image is in the
// node's store.
func (cp *ControlPlane) applyDNS(ctx context.Context) error {
	image, servers, err := cp.addonTargets(ctx)
	if err != nil {
		return err
	}
	cp.dns.Image = image
	*cp.dns = coredns.WithServers(*cp.dns, servers)
	cp.progressf("starting cluster DNS (CoreDNS, Deployment %s/%s, Service %s %s)", coredns.Namespace, coredns.Name, coredns.ServiceName, cp.dns.ServiceIP)
	objs, err := coredns.Objects(*cp.dns)
	if err != nil {
		return err
	}
	return cp.applyAddon(ctx, "cluster DNS", objs)
}

// applyAddon writes an add-on's objects with the admin's credentials
// (package addons/apply); what names the add-on in an error.
func (cp *ControlPlane) applyAddon(ctx context.Context, what string, objs []any) error {
	cfg, err := cp.AdminConfig()
	if err != nil {
		return err
	}
	if err := apply.Objects(ctx, cfg, objs); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// waitDNSReady waits until CoreDNS serves behind the kube-dns Service.
func (cp *ControlPlane) waitDNSReady(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	return cp.waitFor(ctx, nodeComponent, readyPoll, func(ctx context.Context) (bool, string) {
		return coredns.Ready(ctx, client)
	})
}
