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
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"

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

// DataPath is the gate's verdict, when the data path is required, on a
// pod whose own check gave direct: True only once every proxy has synced
// its rules after listed, the moment the gate saw the latest change of the
// EndpointSlices that list the pod. pending names the Services that select
// the pod but list it in none of their slices yet. A pod whose condition
// is already True keeps it on direct alone: the pod's turning Ready
// changes its slices again, and requiring a newer sync then would flip the
// condition back and forth.
func DataPath(direct conditionctl.Result, alreadyTrue bool, pending []string, listed time.Time, proxies []ProxyHealth) conditionctl.Result {
	if direct.Status != corev1.ConditionTrue || alreadyTrue {
		return direct
	}
	if len(pending) > 0 {
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonEndpointsPending,
			Message: fmt.Sprintf("%s; waiting for the EndpointSlices of Service %s to list the pod", direct.Message, strings.Join(pending, ", "))}
	}
	if listed.IsZero() {
		return direct // no Service with proxy rules selects the pod
	}
	if len(proxies) == 0 {
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonProxyNotSynced,
			Message: direct.Message + "; no Ready node to forward its Service's traffic"}
	}
	var behind []string
	for _, p := range proxies {
		switch {
		case p.Problem != "":
			behind = append(behind, fmt.Sprintf("node %s: %s", p.Node, p.Problem))
		case p.Synced.Before(listed):
			behind = append(behind, fmt.Sprintf("node %s: proxy last synced %s before the pod's endpoints changed", p.Node, listed.Sub(p.Synced).Round(time.Millisecond)))
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
		return time.Time{}, fmt.Errorf("its /healthz answer is not kube-proxy's: %w", err)
	}
	if status != http.StatusOK || !h.Healthy {
		return time.Time{}, fmt.Errorf("unhealthy (status %d)", status)
	}
	s, ok := h.Status[family]
	if !ok || h.CurrentTime.IsZero() {
		return time.Time{}, fmt.Errorf("its /healthz answer reports no %s sync", family)
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
// the cluster's Ready nodes forward a pod's Services to it before the
// condition turns True (DataPath). It reads each node's kube-proxy
// /healthz at the node's InternalIP and ProxyHealthzPort.
type DataPathCheck struct {
	// ProxyHealthzPort is the port of kube-proxy's /healthz on every node.
	ProxyHealthzPort int
	// Client reads the proxies' health.
	Client *http.Client
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	nodes    corelisters.NodeLister

	mu   sync.Mutex
	seen map[string]sliceSeen // namespace/name → when its current version was seen
}

type sliceSeen struct {
	resourceVersion string
	at              time.Time
}

// Start registers the informers it reads on factory (the caller starts
// the factory and waits for its caches).
func (d *DataPathCheck) Start(factory informers.SharedInformerFactory) ([]cache.InformerSynced, error) {
	if d.Now == nil {
		d.Now = time.Now
	}
	d.seen = map[string]sliceSeen{}
	svc := factory.Core().V1().Services()
	eps := factory.Discovery().V1().EndpointSlices()
	nodes := factory.Core().V1().Nodes()
	d.services, d.slices, d.nodes = svc.Lister(), eps.Lister(), nodes.Lister()
	record := func(obj any) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		key := s.Namespace + "/" + s.Name
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.seen[key].resourceVersion != s.ResourceVersion {
			d.seen[key] = sliceSeen{resourceVersion: s.ResourceVersion, at: d.Now()}
		}
	}
	if _, err := eps.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
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

// Check turns the direct check's verdict on pod into the data path's.
func (d *DataPathCheck) Check(ctx context.Context, pod *corev1.Pod, direct conditionctl.Result) conditionctl.Result {
	alreadyTrue := slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == ConditionType && c.Status == corev1.ConditionTrue
	})
	if direct.Status != corev1.ConditionTrue || alreadyTrue {
		return DataPath(direct, alreadyTrue, nil, time.Time{}, nil)
	}
	pending, listed, err := d.listed(pod)
	if err != nil {
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonEndpointsPending, Message: err.Error()}
	}
	var proxies []ProxyHealth
	if !listed.IsZero() {
		if proxies, err = d.proxies(ctx, Family(pod.Status.PodIP)); err != nil {
			return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonProxyNotSynced, Message: err.Error()}
		}
	}
	return DataPath(direct, false, pending, listed, proxies)
}

// listed returns the Services that select pod but whose slices do not
// list it yet, and when the latest of the slices that list it was seen.
func (d *DataPathCheck) listed(pod *corev1.Pod) (pending []string, listed time.Time, err error) {
	svcs, err := d.services.Services(pod.Namespace).List(labels.Everything())
	if err != nil {
		return nil, time.Time{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, svc := range svcs {
		if !ServesThroughProxy(svc, pod) {
			continue
		}
		sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name})
		eps, err := d.slices.EndpointSlices(pod.Namespace).List(sel)
		if err != nil {
			return nil, time.Time{}, err
		}
		found := false
		for _, s := range eps {
			if !slices.ContainsFunc(s.Endpoints, func(e discoveryv1.Endpoint) bool {
				return e.TargetRef != nil && e.TargetRef.UID == pod.UID
			}) {
				continue
			}
			found = true
			if at := d.seen[s.Namespace+"/"+s.Name].at; at.After(listed) {
				listed = at
			}
		}
		if !found {
			pending = append(pending, svc.Name)
		}
	}
	return pending, listed, nil
}

// proxies reads the health of every Ready node's proxy for family.
func (d *DataPathCheck) proxies(ctx context.Context, family corev1.IPFamily) ([]ProxyHealth, error) {
	nodes, err := d.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []ProxyHealth
	for _, n := range nodes {
		if !nodeReady(n) {
			continue
		}
		out = append(out, d.proxyHealth(ctx, n, family))
	}
	return out, nil
}

func nodeReady(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
}

func (d *DataPathCheck) proxyHealth(ctx context.Context, n *corev1.Node, family corev1.IPFamily) ProxyHealth {
	h := ProxyHealth{Node: n.Name}
	ip := ""
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
			break
		}
	}
	if ip == "" {
		h.Problem = "no InternalIP to reach its proxy at"
		return h
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(d.ProxyHealthzPort)) + "/healthz"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := d.Client.Do(req)
	if err != nil {
		h.Problem = "proxy did not answer: " + err.Error()
		return h
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		h.Problem = "reading its /healthz: " + err.Error()
		return h
	}
	if h.Synced, err = SyncedAt(resp.StatusCode, body, family, d.Now()); err != nil {
		h.Problem = "proxy " + err.Error()
	}
	return h
}
