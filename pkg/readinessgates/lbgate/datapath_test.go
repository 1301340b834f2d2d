package lbgate

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/steadyplane/steadyplane/pkg/readinessgates/conditionctl"
)

func TestDataPath(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	now := t0.Add(2 * time.Second)
	healthy := conditionctl.Result{Status: corev1.ConditionTrue, Reason: ReasonHealthy, Message: "GET http://10.244.0.5:80/: status 200"}
	unhealthy := conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonUnhealthy, Message: "connection refused"}
	synced := func(node string, d time.Duration) ProxyHealth { return ProxyHealth{Node: node, Synced: t0.Add(d)} }
	listed := Endpoints{Proxied: true, Changed: t0}
	tests := []struct {
		name        string
		direct      conditionctl.Result
		alreadyTrue bool
		eps         Endpoints
		proxies     []ProxyHealth
		now         time.Time
		status      corev1.ConditionStatus
		reason      string
		message     string
	}{
		{name: "the pod does not answer: the direct verdict", direct: unhealthy, eps: listed,
			proxies: []ProxyHealth{synced("n1", time.Second)}, status: corev1.ConditionFalse, reason: ReasonUnhealthy},
		{name: "no Service with proxy rules selects the pod", direct: healthy, status: corev1.ConditionTrue, reason: ReasonHealthy},
		{name: "a Service's slices do not list it yet", direct: healthy, eps: Endpoints{Proxied: true, Pending: []string{"web"}},
			proxies: []ProxyHealth{synced("n1", time.Second)}, status: corev1.ConditionFalse, reason: ReasonEndpointsPending, message: "Service web"},
		{name: "the proxy synced after the endpoint changed", direct: healthy, eps: listed,
			proxies: []ProxyHealth{synced("n1", time.Millisecond)}, status: corev1.ConditionTrue, reason: ReasonHealthy, message: "1 node(s)"},
		{name: "the proxy synced at the very moment", direct: healthy, eps: listed,
			proxies: []ProxyHealth{synced("n1", 0)}, status: corev1.ConditionTrue, reason: ReasonHealthy},
		{name: "the proxy last synced before the change", direct: healthy, eps: listed,
			proxies: []ProxyHealth{synced("n1", -1500*time.Millisecond)}, status: corev1.ConditionFalse, reason: ReasonProxyNotSynced, message: "node n1: proxy has not synced since"},
		{name: "behind, but healthy a health timeout after the change: it has the change", direct: healthy, eps: listed, now: t0.Add(ProxyHealthTimeout),
			proxies: []ProxyHealth{synced("n1", -time.Second)}, status: corev1.ConditionTrue, reason: ReasonHealthy},
		{name: "behind, just under the health timeout", direct: healthy, eps: listed, now: t0.Add(ProxyHealthTimeout - time.Millisecond),
			proxies: []ProxyHealth{synced("n1", -time.Second)}, status: corev1.ConditionFalse, reason: ReasonProxyNotSynced},
		{name: "endpoint already so when the gate started: any healthy proxy", direct: healthy, eps: Endpoints{Proxied: true},
			proxies: []ProxyHealth{synced("n1", -time.Hour)}, status: corev1.ConditionTrue, reason: ReasonHealthy},
		{name: "one of three nodes behind", direct: healthy, eps: listed,
			proxies: []ProxyHealth{synced("n1", time.Second), synced("n2", -time.Second), synced("n3", time.Second)}, status: corev1.ConditionFalse, reason: ReasonProxyNotSynced, message: "node n2"},
		{name: "a proxy that does not answer, even after the timeout", direct: healthy, eps: listed, now: t0.Add(time.Hour),
			proxies: []ProxyHealth{synced("n1", time.Second), {Node: "n2", Problem: "proxy did not answer"}}, status: corev1.ConditionFalse, reason: ReasonProxyNotSynced, message: "node n2: proxy did not answer"},
		{name: "no Ready node", direct: healthy, eps: listed, status: corev1.ConditionFalse, reason: ReasonProxyNotSynced, message: "no Ready node"},
		{name: "already True: kept on the direct check (its turning Ready changed the slices again)", direct: healthy, alreadyTrue: true, eps: listed,
			proxies: []ProxyHealth{synced("n1", -time.Second)}, status: corev1.ConditionTrue, reason: ReasonHealthy},
		{name: "already True but the pod stopped answering", direct: unhealthy, alreadyTrue: true, eps: listed,
			proxies: []ProxyHealth{synced("n1", time.Second)}, status: corev1.ConditionFalse, reason: ReasonUnhealthy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := tt.now
			if at.IsZero() {
				at = now
			}
			got := DataPath(tt.direct, tt.alreadyTrue, tt.eps, tt.proxies, at)
			if got.Status != tt.status || got.Reason != tt.reason || !strings.Contains(got.Message, tt.message) {
				t.Fatalf("got %+v, want %s %s with %q", got, tt.status, tt.reason, tt.message)
			}
			if got.Status == corev1.ConditionFalse && tt.direct.Status == corev1.ConditionTrue && !strings.HasPrefix(got.Message, tt.direct.Message) {
				t.Errorf("message %q drops the direct check's %q", got.Message, tt.direct.Message)
			}
			// A waiting pod's message does not change with the clock
			// (each change would be a status write).
			if again := DataPath(tt.direct, tt.alreadyTrue, tt.eps, tt.proxies, at.Add(time.Millisecond)); got.Status == corev1.ConditionFalse && again.Status == got.Status && again.Message != got.Message {
				t.Errorf("message changed with the clock: %q then %q", got.Message, again.Message)
			}
		})
	}
}

func TestSyncedAt(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		status int
		body   string
		want   time.Time
		family corev1.IPFamily
		err    string
	}{
		// The proxy's clock is an hour ahead: only the age counts.
		{name: "healthy, synced 2s before its own now", status: http.StatusOK,
			body: `{"lastUpdated":"2026-11-26T13:00:00Z","currentTime":"2026-11-26T13:00:00Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-26T12:59:58Z","healthy":true}}}`,
			want: now.Add(-2 * time.Second)},
		{name: "dual-stack: the pod's family counts (the other does not sync for its changes)", status: http.StatusOK,
			body: `{"currentTime":"2026-11-26T12:00:10Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-26T12:00:09Z","healthy":true},"IPv6":{"lastUpdated":"2026-11-26T12:00:05Z","healthy":true}}}`,
			want: now.Add(-time.Second)},
		{name: "dual-stack, an IPv6 pod", family: corev1.IPv6Protocol, status: http.StatusOK,
			body: `{"currentTime":"2026-11-26T12:00:10Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-26T12:00:09Z","healthy":true},"IPv6":{"lastUpdated":"2026-11-26T12:00:05Z","healthy":true}}}`,
			want: now.Add(-5 * time.Second)},
		{name: "an IPv6 pod, a proxy of IPv4 only", family: corev1.IPv6Protocol, status: http.StatusOK,
			body: `{"currentTime":"2026-11-26T12:00:10Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-26T12:00:09Z","healthy":true}}}`,
			err:  "reports no IPv6 sync"},
		{name: "a sync time after its now (clock step): now", status: http.StatusOK,
			body: `{"currentTime":"2026-11-26T12:00:00Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-26T12:00:03Z","healthy":true}}}`,
			want: now},
		{name: "unhealthy", status: http.StatusServiceUnavailable,
			body: `{"currentTime":"2026-11-26T12:00:00Z","healthy":false,"status":{"IPv4":{"lastUpdated":"2026-11-26T11:00:00Z","healthy":false}}}`, err: "IPv4 rules unhealthy"},
		{name: "503 for a node being drained: its rules still count", status: http.StatusServiceUnavailable,
			body: `{"currentTime":"2026-11-26T12:00:10Z","nodeEligible":false,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-26T12:00:09Z","healthy":true}}}`,
			want: now.Add(-time.Second)},
		{name: "the other family unhealthy", status: http.StatusServiceUnavailable,
			body: `{"currentTime":"2026-11-26T12:00:10Z","healthy":false,"status":{"IPv4":{"lastUpdated":"2026-11-26T12:00:09Z","healthy":true},"IPv6":{"lastUpdated":"2026-11-26T11:00:00Z","healthy":false}}}`,
			want: now.Add(-time.Second)},
		{name: "an error page", status: http.StatusBadGateway, body: `<html>bad gateway</html>`, err: "not kube-proxy's"},
		{name: "never synced", status: http.StatusOK,
			body: `{"currentTime":"2026-11-26T12:00:00Z","healthy":true,"status":{"IPv4":{"lastUpdated":"0001-01-01T00:00:00Z","healthy":true}}}`, err: "not synced its IPv4 rules"},
		{name: "an old kube-proxy without per-family status", status: http.StatusOK,
			body: `{"lastUpdated":"2026-11-26T12:00:00Z","currentTime":"2026-11-26T12:00:00Z","healthy":true}`, err: "reports no IPv4 sync"},
		{name: "not JSON", status: http.StatusOK, body: `ok`, err: "not kube-proxy's"},
		{name: "truncated", status: http.StatusOK, body: `{"currentTime":"2026-11-26T12:00:00Z","healthy":tr`, err: "not kube-proxy's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			family := tt.family
			if family == "" {
				family = corev1.IPv4Protocol
			}
			got, err := SyncedAt(tt.status, []byte(tt.body), family, now)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, %v; want an error with %q", got, err, tt.err)
				}
				return
			}
			if err != nil || !got.Equal(tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func FuzzSyncedAt(f *testing.F) {
	f.Add(200, []byte(`{"currentTime":"2026-11-26T12:00:10Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-26T12:00:09Z","healthy":true}}}`))
	f.Add(503, []byte(`{"healthy":false}`))
	f.Add(200, []byte(`{"currentTime":"9999-12-31T23:59:59Z","healthy":true,"status":{"IPv4":{"lastUpdated":"0001-01-01T00:00:01Z","healthy":true}}}`))
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		got, err := SyncedAt(status, body, corev1.IPv4Protocol, now)
		if err == nil && got.After(now) {
			t.Fatalf("synced %v after now %v", got, now)
		}
	})
}

func TestFamily(t *testing.T) {
	for ip, want := range map[string]corev1.IPFamily{"10.244.0.5": corev1.IPv4Protocol, "fd00::5": corev1.IPv6Protocol, "::ffff:10.0.0.1": corev1.IPv4Protocol, "": corev1.IPv4Protocol} {
		if got := Family(ip); got != want {
			t.Errorf("Family(%q) = %s, want %s", ip, got, want)
		}
	}
}

func TestServesThroughProxy(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Labels: map[string]string{"app": "web", "tier": "front"}}}
	svc := func(mut func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, ClusterIP: "10.96.0.20", Type: corev1.ServiceTypeClusterIP}}
		if mut != nil {
			mut(s)
		}
		return s
	}
	tests := []struct {
		name string
		svc  *corev1.Service
		want bool
	}{
		{"ClusterIP selecting the pod", svc(nil), true},
		{"NodePort selecting the pod", svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), true},
		{"headless: no proxy rules", svc(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }), false},
		{"ExternalName", svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName; s.Spec.ClusterIP = "" }), false},
		{"no selector (endpoints by hand)", svc(func(s *corev1.Service) { s.Spec.Selector = nil }), false},
		{"another namespace", svc(func(s *corev1.Service) { s.Namespace = "other" }), false},
		{"selector not matching", svc(func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "db"} }), false},
	}
	for _, tt := range tests {
		if got := ServesThroughProxy(tt.svc, pod); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestDataPathCheckEndpoints runs the check's bookkeeping on real informers
// (over client-go's fake clientset) and a fake clock: what it found at the
// start counts as old, a change to the pod's own endpoint moves the time, a
// change to another pod's does not, a slice version the handler has not
// recorded yet is recorded when read, and only the pod's family counts.
func TestDataPathCheckEndpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := t0
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	setClock := func(d time.Duration) { mu.Lock(); clock = t0.Add(d); mu.Unlock() }
	endpoint := func(uid, ip string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", UID: types.UID(uid)}}
	}
	slice := func(name string, family discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: family, Endpoints: eps}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, ClusterIP: "10.96.0.20"}}
	cs := fake.NewClientset(svc,
		slice("web-v4", discoveryv1.AddressTypeIPv4, endpoint("a", "10.244.0.5", false), endpoint("b", "10.244.0.6", true)),
		slice("web-v6", discoveryv1.AddressTypeIPv6, endpoint("a", "fd00::5", false)))
	factory := informers.NewSharedInformerFactory(cs, 0)
	d := &DataPathCheck{Now: now}
	synced, err := d.Start(factory)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("caches did not sync")
	}
	pod := func(uid, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: uid, UID: types.UID(uid), Labels: map[string]string{"app": "web"}},
			Status: corev1.PodStatus{PodIP: ip}}
	}
	a := pod("a", "10.244.0.5")
	check := func(p *corev1.Pod, family corev1.IPFamily, want Endpoints) {
		t.Helper()
		got, err := d.endpoints(p, family)
		if err != nil || got.Proxied != want.Proxied || !slices.Equal(got.Pending, want.Pending) || !got.Changed.Equal(want.Changed) {
			t.Fatalf("endpoints(%s, %s) = %+v, %v; want %+v", p.Name, family, got, err, want)
		}
	}
	update := func(s *discoveryv1.EndpointSlice) {
		t.Helper()
		if _, err := cs.DiscoveryV1().EndpointSlices("team").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Until the handler has recorded it.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			d.mu.Lock()
			rec := d.seen["team/"+s.Name]
			done := len(rec) == len(s.Endpoints)
			for i := range s.Endpoints {
				done = done && rec[s.Endpoints[i].TargetRef.UID].fingerprint == fingerprint(s, &s.Endpoints[i])
			}
			d.mu.Unlock()
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the handler never recorded the update")
			}
		}
	}

	// What the gate found when it started: old.
	check(a, corev1.IPv4Protocol, Endpoints{Proxied: true})
	// Another pod's endpoint changes: a's time stays.
	setClock(time.Second)
	update(slice("web-v4", discoveryv1.AddressTypeIPv4, endpoint("a", "10.244.0.5", false), endpoint("b", "10.244.0.6", false)))
	check(a, corev1.IPv4Protocol, Endpoints{Proxied: true})
	// a's own endpoint changes: the time the handler saw it.
	setClock(2 * time.Second)
	update(slice("web-v4", discoveryv1.AddressTypeIPv4, endpoint("a", "10.244.0.5", true), endpoint("b", "10.244.0.6", false)))
	setClock(3 * time.Second)
	check(a, corev1.IPv4Protocol, Endpoints{Proxied: true, Changed: t0.Add(2 * time.Second)})
	// The lister ahead of the handler (it is updated first): a version not
	// recorded yet counts as changed when read.
	d.mu.Lock()
	delete(d.seen, "team/web-v4")
	d.mu.Unlock()
	check(a, corev1.IPv4Protocol, Endpoints{Proxied: true, Changed: t0.Add(3 * time.Second)})
	// The IPv6 slice, unchanged since the start, for an IPv6 pod.
	check(pod("a", "fd00::5"), corev1.IPv6Protocol, Endpoints{Proxied: true})
	// A selected pod no slice lists yet.
	check(pod("c", "10.244.0.7"), corev1.IPv4Protocol, Endpoints{Proxied: true, Pending: []string{"web"}})
	// A pod no Service selects.
	other := pod("d", "10.244.0.8")
	other.Labels = map[string]string{"app": "db"}
	check(other, corev1.IPv4Protocol, Endpoints{})
}
