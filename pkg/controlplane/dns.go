package controlplane

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/steadyplane/steadyplane/pkg/addons/coredns"
	"github.com/steadyplane/steadyplane/pkg/join"
	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// prepareDNS decides the cluster's DNS (package coredns): its Service
// address and domain for the node agent and the node's resolver file.
// Without the pieces it needs (a pod network, kube-proxy, the controllers)
// it says so and leaves DNS out. Its image is added to the node's store
// later, off the path to the API server (startDNSImage).
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

// startDNSImage adds the image CoreDNS runs from (the binary the static
// pods run) to the node agent's image store, in the background: the first
// time it copies a quarter of a gigabyte, which the API server does not
// wait for. applyDNS waits for it.
func (cp *ControlPlane) startDNSImage() {
	if cp.dns == nil || cp.dnsImage != nil {
		return
	}
	store := images.StoreDir(cp.dir.nodeRoot())
	bin, err := cp.installedBinary()
	if err != nil {
		cp.dnsImage = &pending{done: make(chan struct{}), err: err}
		close(cp.dnsImage.done)
		return
	}
	cp.dnsImage = startPending(func() error {
		s, err := images.Open(store)
		if err != nil {
			return err
		}
		ref, err := s.AddBinary(bin, images.UnpackOptions{Rootless: os.Geteuid() != 0})
		if err != nil {
			return fmt.Errorf("the DNS image: %w", err)
		}
		cp.dns.Image = ref
		return nil
	})
}

// applyDNS writes the DNS's objects into the API, once its image is in the
// node's store.
func (cp *ControlPlane) applyDNS(ctx context.Context) error {
	cp.startDNSImage()
	if err := cp.dnsImage.wait(ctx); err != nil {
		return err
	}
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	// The API servers that serve now (what this server saved may hold
	// servers gone since, a cluster reset's among them): servers of one
	// release that see the same list write the same Deployment.
	alts := cp.alternatives()
	if live, err := join.ListServers(ctx, client); err == nil && len(live) > 0 && len(alts) > 0 {
		alts = join.MergeServers(alts[0], live) // a joining server may not be listed yet
	}
	*cp.dns = coredns.WithServers(*cp.dns, alts)
	cp.progressf("starting cluster DNS (CoreDNS, Deployment %s/%s, Service %s %s)", coredns.Namespace, coredns.Name, coredns.ServiceName, cp.dns.ServiceIP)
	objs, err := coredns.Objects(*cp.dns)
	if err != nil {
		return err
	}
	return coredns.Apply(ctx, client, objs)
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
