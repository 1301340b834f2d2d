package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/steadyplane/steadyplane/pkg/client/patient"
	"github.com/steadyplane/steadyplane/pkg/node/podnet"
)

// peerResync is how often the routes to other nodes' pods are made again
// without a change of Nodes (someone may have removed one).
const peerResync = 30 * time.Second

var peerRoutes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "steadyplane_node_pod_peer_routes", Help: "Routes from this node to other nodes' pod ranges."})

// routePeers keeps this host's routes to the other nodes' pods (their pod
// ranges through their addresses) and their exemption from the pod
// network's masquerade, as Nodes come, change and go.
func (a *Agent) routePeers(ctx context.Context) {
	wake := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	nodes, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: patient.ListerWatcher(ctx, cache.NewListWatchFromClient(a.client.CoreV1().RESTClient(), "nodes", metav1.NamespaceAll, fields.Everything()), patient.DefaultOptions),
		ObjectType:    &corev1.Node{},
		Handler:       cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, n any) { poke(n) }, DeleteFunc: poke},
	})
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return
	}
	var ipt utiliptables.Interface
	if a.opts.Network.NAT() {
		ipt = utiliptables.New(utiliptables.ProtocolIPv4)
	}
	r := peerRouter{agent: a, ipt: ipt, said: map[string]string{}}
	// Routes an earlier agent made are this one's to remove when their
	// nodes are gone.
	if had, err := podnet.HasPeerRoutes(); err == nil && had {
		r.acted = true
	}
	tick := time.NewTicker(peerResync)
	defer tick.Stop()
	force := true
	for {
		var peers []podnet.Peer
		for _, obj := range nodes.List() {
			peers = append(peers, peerOf(obj.(*corev1.Node)))
		}
		r.sync(peers, force)
		select {
		case <-ctx.Done():
			return
		case <-wake:
			force = false
		case <-tick.C:
			force = true
		}
	}
}

// peerOf is what the routes to n's pods are made from.
func peerOf(n *corev1.Node) podnet.Peer {
	p := podnet.Peer{Name: n.Name, PodCIDRs: n.Spec.PodCIDRs}
	if len(p.PodCIDRs) == 0 && n.Spec.PodCIDR != "" {
		p.PodCIDRs = []string{n.Spec.PodCIDR}
	}
	for _, addr := range n.Status.Addresses {
		if addr.Type == corev1.NodeInternalIP {
			p.Address = addr.Address
			break
		}
	}
	return p
}

// peerRouter applies PeerRoutes and says once what it cannot route.
type peerRouter struct {
	agent *Agent
	ipt   utiliptables.Interface
	// acted is set once routes were made: from then on an empty set is
	// applied too (removing the last peer's). Until then an agent without
	// peers (a single node) touches no route and no rule.
	acted bool
	said  map[string]string // node → the last reason given for no route
	err   string            // the last error applying, logged once
	// applied is the last set of routes applied, logged when it changes.
	applied string
}

// sync applies the routes and rules peers call for: when they changed,
// after a failure, or with force (the resync: someone may have removed
// them). Node status updates come every few seconds from every node; most
// change nothing here, and cost no iptables call.
func (r *peerRouter) sync(peers []podnet.Peer, force bool) {
	a := r.agent
	bridge, own := a.opts.Network.Bridge(), a.opts.Network.PodCIDR()
	connected, err := podnet.ConnectedNetworks(bridge)
	if err != nil {
		r.failed(fmt.Errorf("listing this host's networks: %w", err))
		return
	}
	routes, unroutable := podnet.PeerRoutes(a.opts.NodeName, own, peers, connected)
	for node, why := range unroutable {
		if r.said[node] != why {
			r.said[node] = why
			klog.InfoS("No route to another node's pods", "node", node, "reason", why)
			a.nodeEvent(corev1.EventTypeWarning, "PodRoutesUnavailable", "Pods on this node cannot reach the pods of node %s: %s", node, why)
		}
	}
	for node := range r.said {
		if _, still := unroutable[node]; !still {
			delete(r.said, node)
		}
	}
	if len(routes) == 0 && !r.acted {
		return
	}
	text := fmt.Sprint(routes)
	if text == r.applied && r.err == "" && !force {
		return
	}
	r.acted = true
	// The rules go in even when a route failed: the routes that were made
	// carry traffic that must keep its source.
	err = podnet.SetPeerRoutes(routes)
	if r.ipt != nil {
		err = errors.Join(err, podnet.SetPeerNoMasquerade(r.ipt, own, routes))
	}
	if err != nil {
		r.failed(err)
		return
	}
	if text != r.applied || r.err != "" {
		klog.InfoS("Routes to other nodes' pods", "routes", text)
		r.applied = text
	}
	r.err = ""
	peerRoutes.Set(float64(len(routes)))
}

func (r *peerRouter) failed(err error) {
	if err.Error() != r.err {
		r.err = err.Error()
		klog.ErrorS(err, "Setting the routes to other nodes' pods")
		r.agent.nodeEvent(corev1.EventTypeWarning, "PodRoutesFailed", "Setting the routes to other nodes' pods: %v", err)
	}
}
