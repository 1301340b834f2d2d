package altsvcfilter

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

var admin = &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}

func newRequest(path string, h2, tlsOn bool) *http.Request {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if h2 {
		r.ProtoMajor, r.ProtoMinor, r.Proto = 2, 0, "HTTP/2.0"
	}
	if tlsOn {
		r.TLS = &tls.ConnectionState{}
	} else {
		r.TLS = nil
	}
	return r
}

func TestShouldAdvertise(t *testing.T) {
	tests := []struct {
		name string
		path string
		h2   bool
		tls  bool
		user user.Info
		want bool
	}{
		{"authenticated h2 TLS", "/api/v1/pods", true, true, admin, true},
		{"service account", "/apis/apps/v1", true, true, &user.DefaultInfo{Name: "system:serviceaccount:a:b", Groups: []string{"system:serviceaccounts"}}, true},
		{"HTTP/1.1", "/api/v1/pods", false, true, admin, false},
		{"no TLS", "/api/v1/pods", true, false, admin, false},
		{"anonymous", "/api/v1/pods", true, true, &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}, false},
		{"unauthenticated group", "/api", true, true, &user.DefaultInfo{Name: "x", Groups: []string{user.AllUnauthenticated}}, false},
		{"no user", "/api", true, true, nil, false},
		{"empty user name", "/api", true, true, &user.DefaultInfo{}, false},
		{"readyz", "/readyz", true, true, admin, false},
		{"livez check", "/livez/ping", true, true, admin, false},
		{"healthz", "/healthz", true, true, admin, false},
		{"metrics", "/metrics", true, true, admin, false},
		{"version", "/version", true, true, admin, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ShouldAdvertise(newRequest(tt.path, tt.h2, tt.tls), tt.user); got != tt.want {
				t.Errorf("ShouldAdvertise = %v, want %v", got, tt.want)
			}
		})
	}
}

func endpoints(port corev1.EndpointPort, ready []string, notReady ...string) *corev1.Endpoints {
	ss := corev1.EndpointSubset{Ports: []corev1.EndpointPort{port}}
	for _, ip := range ready {
		ss.Addresses = append(ss.Addresses, corev1.EndpointAddress{IP: ip})
	}
	for _, ip := range notReady {
		ss.NotReadyAddresses = append(ss.NotReadyAddresses, corev1.EndpointAddress{IP: ip})
	}
	return &corev1.Endpoints{Subsets: []corev1.EndpointSubset{ss}}
}

func TestValueFromEndpoints(t *testing.T) {
	https := corev1.EndpointPort{Name: "https", Port: 6443}
	tests := []struct {
		name string
		ep   *corev1.Endpoints
		want string
	}{
		{"nil", nil, ""},
		{"one server: nothing to offer", endpoints(https, []string{"10.0.0.2"}), ""},
		{"three servers, sorted", endpoints(https, []string{"10.0.0.4", "10.0.0.2", "10.0.0.3"}),
			`h2="10.0.0.2:6443"; ma=3600, h2="10.0.0.3:6443"; ma=3600, h2="10.0.0.4:6443"; ma=3600`},
		{"not-ready addresses left out", endpoints(https, []string{"10.0.0.2"}, "10.0.0.3"), ""},
		{"ipv6", endpoints(https, []string{"2001:db8::2", "2001:db8::1"}), `h2="[2001:db8::1]:6443"; ma=3600, h2="[2001:db8::2]:6443"; ma=3600`},
		{"unnamed single port", endpoints(corev1.EndpointPort{Port: 443}, []string{"10.0.0.2", "10.0.0.3"}), `h2="10.0.0.2:443"; ma=3600, h2="10.0.0.3:443"; ma=3600`},
		{"other port name", endpoints(corev1.EndpointPort{Name: "http", Port: 80}, []string{"10.0.0.2", "10.0.0.3"}), ""},
		{"not an IP", endpoints(https, []string{"10.0.0.2", "bogus"}), ""},
		{"duplicates", endpoints(https, []string{"10.0.0.2", "10.0.0.2"}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValueFromEndpoints(tt.ep, time.Hour); got != tt.want {
				t.Errorf("ValueFromEndpoints =\n %q\nwant\n %q", got, tt.want)
			}
		})
	}
}

func TestFilter(t *testing.T) {
	adv := &Advertisement{}
	h := WithAlternativeServices(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), adv)
	serve := func(u user.Info) string {
		r := newRequest("/api", true, true)
		if u != nil {
			r = r.WithContext(request.WithUser(r.Context(), u))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Header().Get("Alt-Svc")
	}
	if v := serve(admin); v != "" {
		t.Errorf("nothing known yet, sent %q", v)
	}
	Update(adv, endpoints(corev1.EndpointPort{Name: "https", Port: 6443}, []string{"10.0.0.2", "10.0.0.3"}), time.Hour)
	if v := serve(admin); v != `h2="10.0.0.2:6443"; ma=3600, h2="10.0.0.3:6443"; ma=3600` {
		t.Errorf("admin got %q", v)
	}
	if v := serve(nil); v != "" {
		t.Errorf("request without a user got %q", v)
	}
	if adv.Set(adv.Value()) {
		t.Error("setting the same value reported a change")
	}
	Update(adv, nil, time.Hour)
	if v := serve(admin); v != "" {
		t.Errorf("after the Endpoints were deleted, sent %q", v)
	}
}

func BenchmarkFilter(b *testing.B) {
	adv := &Advertisement{}
	Update(adv, endpoints(corev1.EndpointPort{Name: "https", Port: 6443}, []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}), time.Hour)
	h := WithAlternativeServices(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), adv)
	r := newRequest("/api/v1/namespaces/default/pods", true, true)
	r = r.WithContext(request.WithUser(r.Context(), admin))
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}

// TestFilterDropsBackendHeaders: what a proxied backend sends as Alt-Svc
// never reaches the client, whether the caller may learn the list (it gets
// exactly the list) or not (it gets none). The backend is reached through
// net/http/httputil's reverse proxy, which copies its headers by adding them,
// as the API server's proxy subresources do.
func TestFilterDropsBackendHeaders(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Alt-Svc", `h2="203.0.113.9:443"; ma=86400`)
		if r.URL.Query().Get("empty") == "" {
			w.Write([]byte("from the pod"))
		}
	}))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	adv := &Advertisement{}
	h := WithAlternativeServices(proxy, adv)
	serve := func(u user.Info, query string) []string {
		r := newRequest("/api/v1/namespaces/default/pods/web/proxy/"+query, true, true)
		if u != nil {
			r = r.WithContext(request.WithUser(r.Context(), u))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Result().Header.Values("Alt-Svc")
	}
	anonymous := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	for _, q := range []string{"", "?empty=1"} {
		if v := serve(admin, q); len(v) != 0 {
			t.Errorf("one server, admin %q: backend's Alt-Svc passed: %q", q, v)
		}
		if v := serve(anonymous, q); len(v) != 0 {
			t.Errorf("one server, anonymous %q: backend's Alt-Svc passed: %q", q, v)
		}
	}
	Update(adv, endpoints(corev1.EndpointPort{Name: "https", Port: 6443}, []string{"10.0.0.2", "10.0.0.3"}), time.Hour)
	want := `h2="10.0.0.2:6443"; ma=3600, h2="10.0.0.3:6443"; ma=3600`
	if v := serve(admin, ""); len(v) != 1 || v[0] != want {
		t.Errorf("two servers, admin: Alt-Svc %q, want only %q", v, want)
	}
	if v := serve(anonymous, ""); len(v) != 0 {
		t.Errorf("two servers, anonymous: %q", v)
	}
}

// TestFilterKeepsHijacking: exec, attach and port-forward hijack the
// connection; the wrapped writer must still allow it.
func TestFilterKeepsHijacking(t *testing.T) {
	adv := &Advertisement{}
	hijacked := make(chan bool, 1)
	srv := httptest.NewServer(WithAlternativeServices(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, ok := w.(http.Hijacker)
		_, flush := w.(http.Flusher)
		hijacked <- ok && flush
	}), adv))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !<-hijacked {
		t.Error("the wrapped writer lost http.Hijacker or http.Flusher")
	}
}
