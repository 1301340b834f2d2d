package lbgate

import (
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/steadyplane/steadyplane/pkg/readinessgates/conditionctl"
)

func TestDataPath(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	healthy := conditionctl.Result{Status: corev1.ConditionTrue, Reason: ReasonHealthy, Message: "GET http://10.244.0.5:80/: status 200"}
	unhealthy := conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonUnhealthy, Message: "connection refused"}
	synced := func(node string, d time.Duration) ProxyHealth { return ProxyHealth{Node: node, Synced: t0.Add(d)} }
	tests := []struct {
		name        string
		direct      conditionctl.Result
		alreadyTrue bool
		pending     []string
		listed      time.Time
		proxies     []ProxyHealth
		status      corev1.ConditionStatus
		reason      string
		message     string
	}{
		{name: "the pod does not answer: the direct verdict", direct: unhealthy, listed: t0,
			proxies: []ProxyHealth{synced("n1", time.Second)}, status: corev1.ConditionFalse, reason: ReasonUnhealthy},
		{name: "no Service with proxy rules selects the pod", direct: healthy, status: corev1.ConditionTrue, reason: ReasonHealthy},
		{name: "a Service's slices do not list it yet", direct: healthy, pending: []string{"web"}, listed: t0,
			proxies: []ProxyHealth{synced("n1", time.Second)}, status: corev1.ConditionFalse, reason: ReasonEndpointsPending, message: "Service web"},
		{name: "the proxy synced after the slice changed", direct: healthy, listed: t0,
			proxies: []ProxyHealth{synced("n1", time.Millisecond)}, status: corev1.ConditionTrue, reason: ReasonHealthy, message: "1 node(s)"},
		{name: "the proxy synced at the very moment", direct: healthy, listed: t0,
			proxies: []ProxyHealth{synced("n1", 0)}, status: corev1.ConditionTrue, reason: ReasonHealthy},
		{name: "the proxy last synced before the change", direct: healthy, listed: t0,
			proxies: []ProxyHealth{synced("n1", -1500*time.Millisecond)}, status: corev1.ConditionFalse, reason: ReasonProxyNotSynced, message: "node n1: proxy last synced 1.5s before"},
		{name: "one of three nodes behind", direct: healthy, listed: t0,
			proxies: []ProxyHealth{synced("n1", time.Second), synced("n2", -time.Second), synced("n3", time.Second)}, status: corev1.ConditionFalse, reason: ReasonProxyNotSynced, message: "node n2"},
		{name: "a proxy that does not answer", direct: healthy, listed: t0,
			proxies: []ProxyHealth{synced("n1", time.Second), {Node: "n2", Problem: "proxy did not answer: connection refused"}}, status: corev1.ConditionFalse, reason: ReasonProxyNotSynced, message: "node n2: proxy did not answer"},
		{name: "no Ready node", direct: healthy, listed: t0, status: corev1.ConditionFalse, reason: ReasonProxyNotSynced, message: "no Ready node"},
		{name: "already True: kept on the direct check (its turning Ready changed the slices again)", direct: healthy, alreadyTrue: true, listed: t0,
			proxies: []ProxyHealth{synced("n1", -time.Second)}, status: corev1.ConditionTrue, reason: ReasonHealthy},
		{name: "already True but the pod stopped answering", direct: unhealthy, alreadyTrue: true, listed: t0,
			proxies: []ProxyHealth{synced("n1", time.Second)}, status: corev1.ConditionFalse, reason: ReasonUnhealthy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DataPath(tt.direct, tt.alreadyTrue, tt.pending, tt.listed, tt.proxies)
			if got.Status != tt.status || got.Reason != tt.reason || !strings.Contains(got.Message, tt.message) {
				t.Fatalf("got %+v, want %s %s with %q", got, tt.status, tt.reason, tt.message)
			}
			if got.Status == corev1.ConditionFalse && tt.direct.Status == corev1.ConditionTrue && !strings.HasPrefix(got.Message, tt.direct.Message) {
				t.Errorf("message %q drops the direct check's %q", got.Message, tt.direct.Message)
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
			body: `{"currentTime":"2026-11-26T12:00:00Z","healthy":false,"status":{"IPv4":{"lastUpdated":"2026-11-26T11:00:00Z","healthy":false}}}`, err: "unhealthy (status 503)"},
		{name: "200 that says unhealthy", status: http.StatusOK, body: `{"healthy":false}`, err: "unhealthy"},
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
		if err == nil && status != http.StatusOK {
			t.Fatalf("status %d accepted", status)
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
