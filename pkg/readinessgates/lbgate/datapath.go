package lbgate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"
	nodeutil "k8s.io/kubernetes/pkg/util/node"

	"github.com/steadyplane/steadyplane/pkg/readinessgates/conditionctl"
)

// Reasons of the condition when the data path is required (DataPath).
const (
	// ReasonEndpointsPending: a Service selects the pod, but none of its
	// EndpointSlices lists the pod yet, so no proxy can know of it.
	ReasonEndpointsPending = "EndpointsPending"
	// ReasonProxyNotSynced: a node's proxy is unhealthy, does not answer,
	// or has not synced its rules since the pod's endpoints last changed.
	ReasonProxyNotSynced = "ProxyNotSynced"
)

// ProxyHealth is one node's service proxy as the gate last read it.
type ProxyHealth struct {
	// Node is the node's name.
	Node string
	// Problem, when not empty, says why the proxy does not count as
	// synced: it did not answer, answered unhealthy, or reported nothing.
	Problem string
	// Synced is when it last synced its rules, on the gate's clock
	// (SyncedAt).
	Synced time.Time
}

// Endpoints is what the gate knows of a pod's place in the EndpointSlices
// of the Services that select it.
type Endpoints struct {
	// Proxied: a Service with proxy rules selects the pod
	// (ServesThroughProxy).
	Proxied bool
	// Pending names those Services whose slices of the pod's address
	// family do not list it yet.
	Pending []string
	// Changed is when the gate saw the pod's endpoint last change in
	// them; zero when it was so already when the gate started.
	Changed time.Time
}

// ProxyHealthTimeout is kube-proxy's health timeout at its defaults (twice
// its --sync-period of 30s): a change it received and has not synced
// within it turns its /healthz unhealthy. A proxy that answers healthy
// that long after a change has therefore synced the change, whatever its
// last sync time says (it may have synced before the gate saw the change).
const ProxyHealthTimeout = time.Minute

// DataPath is the gate's verdict, when the data path is required, on a
// pod whose own check gave direct, at now: True only once every proxy has
// synced its rules after the pod's endpoint last changed (or answered
// healthy for ProxyHealthTimeout since). A pod whose condition is already
// True keeps it on direct alone: the pod's turning Ready changes its
// endpoint again, and requiring a newer sync then would flip the condition
// back and forth. Messages hold no durations, so that a waiting pod's
// condition is not rewritten at every check.
func DataPath(direct conditionctl.Result, alreadyTrue bool, eps Endpoints, proxies []ProxyHealth, now time.Time) conditionctl.Result {
	if direct.Status != corev1.ConditionTrue || alreadyTrue || !eps.Proxied {
		return direct
	}
	if len(eps.Pending) > 0 {
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonEndpointsPending,
			Message: fmt.Sprintf("%s; waiting for the EndpointSlices of Service %s to list the pod", direct.Message, strings.Join(eps.Pending, ", "))}
	}
	if len(proxies) == 0 {
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonProxyNotSynced,
			Message: direct.Message + "; no Ready node to forward its Service's traffic"}
	}
	settled := !eps.Changed.IsZero() && now.Sub(eps.Changed) >= ProxyHealthTimeout
	var behind []string
	for _, p := range proxies {
		switch {
		case p.Problem != "":
			behind = append(behind, fmt.Sprintf("node %s: %s", p.Node, p.Problem))
		case p.Synced.Before(eps.Changed) && !settled:
			behind = append(behind, fmt.Sprintf("node %s: proxy has not synced since the pod's endpoints changed", p.Node))
		}
	}
	if len(behind) > 0 {
		slices.Sort(behind)
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonProxyNotSynced,
			Message: direct.Message + "; " + strings.Join(behind, "; ")}
	}
	return conditionctl.Result{Status: corev1.ConditionTrue, Reason: ReasonHealthy,
		Message: fmt.Sprintf("%s; the proxies of %d node(s) synced after its endpoints changed", direct.Message, len(proxies))}
}

// SyncedAt reads a kube-proxy /healthz answer, read at the gate's time
// now: when the proxier of family (the pod address's) last synced its
// rules, on the gate's clock. The answer's lastUpdated is "now" for a
// healthy proxy (kept so for old clients); the per-family status holds the
// real sync times, and the proxy's own currentTime turns them into an age,
// so the two machines' clocks need not agree. Only the pod's family
// counts: a dual-stack kube-proxy's other proxier does not sync for a
// change that is not its own.
func SyncedAt(status int, body []byte, family corev1.IPFamily, now time.Time) (time.Time, error) {
	var h healthcheck.ProxyHealth
	if err := json.Unmarshal(body, &h); err != nil {
		return time.Time{}, fmt.Errorf("its /healthz answer (status %d) is not kube-proxy's: %w", status, err)
	}
	// The family's own health decides: the answer is 503 also for a node
	// being deleted or drained (nodeEligible false), whose rules still
	// forward, and for the other family's proxier falling behind.
	s, ok := h.Status[family]
	if !ok || h.CurrentTime.IsZero() {
		return time.Time{}, fmt.Errorf("its /healthz answer (status %d) reports no %s sync", status, family)
	}
	if !s.Healthy {
		return time.Time{}, fmt.Errorf("reports its %s rules unhealthy: a change waits longer than its health timeout", family)
	}
	if s.LastUpdated.IsZero() {
		return time.Time{}, fmt.Errorf("has not synced its %s rules yet", family)
	}
	age := max(h.CurrentTime.Sub(s.LastUpdated), 0)
	return now.Add(-age), nil
}

// Family is the IP family of a pod's address.
func Family(podIP string) corev1.IPFamily {
	if ip := net.ParseIP(podIP); ip != nil && ip.To4() == nil {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// ServesThroughProxy tells whether the node proxies program rules for svc
// that can carry traffic to pod: a Service with a cluster IP whose
// selector matches the pod.
func ServesThroughProxy(svc *corev1.Service, pod *corev1.Pod) bool {
	if svc.Namespace != pod.Namespace || len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return false
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return false
	}
	return labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels))
}

// DataPathCheck requires, on top of the direct check, that the proxies of
// the cluster's Ready nodes have taken in a pod's endpoint before the
// condition turns True (DataPath). It reads each node's kube-proxy
// /healthz at the node's primary address (InternalIP, else ExternalIP, as
// upstream's GetNodeHostIPs) and ProxyHealthzPort.
type DataPathCheck struct {
	// ProxyHealthzPort is the port of kube-proxy's /healthz on every node.
	ProxyHealthzPort int
	// Client reads the proxies' health (no proxy, no redirects).
	Client *http.Client
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	nodes    corelisters.NodeLister

	mu sync.Mutex
	// seen: per slice (namespace/name), per pod, its endpoint as last seen
	// and when it was first seen so.
	seen map[string]map[types.UID]endpointSeen
}

type endpointSeen struct {
	fingerprint string
	at          time.Time
}

// fingerprint is what of a pod's endpoint the proxies program: its
// addresses, conditions and the slice's ports.
func fingerprint(s *discoveryv1.EndpointSlice, e *discoveryv1.Endpoint) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%v|", s.AddressType, e.Addresses)
	for _, c := range []*bool{e.Conditions.Ready, e.Conditions.Serving, e.Conditions.Terminating} {
		if c == nil {
			b.WriteString("-")
		} else {
			fmt.Fprint(&b, *c)
		}
	}
	for _, p := range s.Ports {
		fmt.Fprintf(&b, "|%v/%v/%v", ptrString(p.Name), ptrString(p.Protocol), ptrString(p.Port))
	}
	return b.String()
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

// Start registers the informers it reads on factory (the caller starts
// the factory and waits for its caches).
func (d *DataPathCheck) Start(factory informers.SharedInformerFactory) ([]cache.InformerSynced, error) {
	if d.Now == nil {
		d.Now = time.Now
	}
	d.seen = map[string]map[types.UID]endpointSeen{}
	svc := factory.Core().V1().Services()
	eps := factory.Discovery().V1().EndpointSlices()
	nodes := factory.Core().V1().Nodes()
	d.services, d.slices, d.nodes = svc.Lister(), eps.Lister(), nodes.Lister()
	if _, err := eps.Informer().AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { d.record(obj, initial) },
		UpdateFunc: func(_, obj any) { d.record(obj, false) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
				d.mu.Lock()
				delete(d.seen, s.Namespace+"/"+s.Name)
				d.mu.Unlock()
			}
		},
	}); err != nil {
		return nil, err
	}
	return []cache.InformerSynced{svc.Informer().HasSynced, eps.Informer().HasSynced, nodes.Informer().HasSynced}, nil
}

// record notes when each pod's endpoint in a slice changed: now, or the
// zero time for what the gate found when it started (a proxy that is
// healthy has either synced that or will within its health timeout).
func (d *DataPathCheck) record(obj any, initial bool) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	at := time.Time{}
	if !initial {
		at = d.Now()
	}
	d.update(s, at)
}

// update brings seen up to slice s, with at for the endpoints that
// changed; it returns the slice's record. d.mu is held.
func (d *DataPathCheck) update(s *discoveryv1.EndpointSlice, at time.Time) map[types.UID]endpointSeen {
	key := s.Namespace + "/" + s.Name
	old := d.seen[key]
	cur := make(map[types.UID]endpointSeen, len(s.Endpoints))
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		if e.TargetRef == nil || e.TargetRef.UID == "" {
			continue
		}
		fp := fingerprint(s, e)
		if prev, ok := old[e.TargetRef.UID]; ok && prev.fingerprint == fp {
			cur[e.TargetRef.UID] = prev
		} else {
			cur[e.TargetRef.UID] = endpointSeen{fingerprint: fp, at: at}
		}
	}
	d.seen[key] = cur
	return cur
}

// Check turns the direct check's verdict on pod into the data path's.
func (d *DataPathCheck) Check(ctx context.Context, pod *corev1.Pod, direct conditionctl.Result) conditionctl.Result {
	alreadyTrue := slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == ConditionType && c.Status == corev1.ConditionTrue
	})
	if direct.Status != corev1.ConditionTrue || alreadyTrue {
		return DataPath(direct, alreadyTrue, Endpoints{}, nil, time.Time{})
	}
	family := Family(pod.Status.PodIP)
	eps, err := d.endpoints(pod, family)
	if err != nil {
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonEndpointsPending, Message: err.Error()}
	}
	var proxies []ProxyHealth
	if eps.Proxied && len(eps.Pending) == 0 {
		if proxies, err = d.proxies(ctx, family); err != nil {
			return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonProxyNotSynced, Message: err.Error()}
		}
	}
	return DataPath(direct, false, eps, proxies, d.Now())
}

// endpoints finds pod in the slices of family of the Services that select
// it. A slice version the lister has and the event handler has not yet
// recorded (the lister is updated first) is recorded here, as changed now.
func (d *DataPathCheck) endpoints(pod *corev1.Pod, family corev1.IPFamily) (Endpoints, error) {
	var eps Endpoints
	svcs, err := d.services.Services(pod.Namespace).List(labels.Everything())
	if err != nil {
		return eps, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, svc := range svcs {
		if !ServesThroughProxy(svc, pod) {
			continue
		}
		eps.Proxied = true
		sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name})
		list, err := d.slices.EndpointSlices(pod.Namespace).List(sel)
		if err != nil {
			return eps, err
		}
		found := false
		for _, s := range list {
			if string(s.AddressType) != string(family) {
				continue
			}
			rec, ok := d.seen[s.Namespace+"/"+s.Name][pod.UID]
			if i := slices.IndexFunc(s.Endpoints, func(e discoveryv1.Endpoint) bool { return e.TargetRef != nil && e.TargetRef.UID == pod.UID }); i >= 0 {
				if !ok || rec.fingerprint != fingerprint(s, &s.Endpoints[i]) {
					rec = d.update(s, d.Now())[pod.UID]
				}
				found = true
				if rec.at.After(eps.Changed) {
					eps.Changed = rec.at
				}
			}
		}
		if !found {
			eps.Pending = append(eps.Pending, svc.Name)
		}
	}
	return eps, nil
}

// proxies reads the health of every Ready node's proxy for family, the
// nodes at once.
func (d *DataPathCheck) proxies(ctx context.Context, family corev1.IPFamily) ([]ProxyHealth, error) {
	nodes, err := d.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var ready []*corev1.Node
	for _, n := range nodes {
		if nodeutil.IsNodeReady(n) {
			ready = append(ready, n)
		}
	}
	out := make([]ProxyHealth, len(ready))
	var wg sync.WaitGroup
	for i, n := range ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = d.proxyHealth(ctx, n, family)
		}()
	}
	wg.Wait()
	return out, nil
}

func (d *DataPathCheck) proxyHealth(ctx context.Context, n *corev1.Node, family corev1.IPFamily) ProxyHealth {
	h := ProxyHealth{Node: n.Name}
	ips, err := nodeutil.GetNodeHostIPs(n)
	if err != nil {
		h.Problem = "no address to reach its proxy at: " + err.Error()
		return h
	}
	ip := ips[0].String()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(d.ProxyHealthzPort)) + "/healthz"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	// The time before asking: the sync it reports cannot be later.
	asked := d.Now()
	resp, err := d.Client.Do(req)
	if err != nil {
		h.Problem = "proxy did not answer at " + url
		return h
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		h.Problem = "reading its /healthz: " + err.Error()
		return h
	}
	if h.Synced, err = SyncedAt(resp.StatusCode, body, family, asked); err != nil {
		h.Problem = "proxy " + err.Error()
	}
	return h
}
