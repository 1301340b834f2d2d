// Package altsvcfilter is the server half of KEP-3037 "client-go alternative
// services": an http.Handler filter that tells authenticated HTTP/2 clients
// which API servers they may use instead of this one, in an RFC 7838 Alt-Svc
// header. The list is the ready addresses of the default/kubernetes Endpoints,
// which the API servers' lease reconciler keeps to the live servers; an
// informer keeps it in memory, so no request reads the API.
//
// The filter must run inside the authentication filter (it wraps the API
// handler), since only authenticated callers may learn the list.
package altsvcfilter

import (
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/altsvc"
	"github.com/steadyplane/steadyplane/pkg/apiserver/paths"
)

// DefaultMaxAge is the "ma" of each advertised entry: how long a client may
// keep using an address it has not heard of again.
const DefaultMaxAge = time.Hour

// ShouldAdvertise decides whether a request's response carries Alt-Svc:
// only for an authenticated caller (KEP-3037: the addresses of the control
// plane are not for anonymous eyes), only over TLS with HTTP/2 (the client
// side requires both), and never on health or metrics endpoints.
func ShouldAdvertise(r *http.Request, u user.Info) bool {
	if r.TLS == nil || r.ProtoMajor != 2 || paths.IsHealthOrMetrics(r.URL.Path) {
		return false
	}
	return IsAuthenticated(u)
}

// IsAuthenticated reports whether u is a caller that proved who it is.
func IsAuthenticated(u user.Info) bool {
	if u == nil || u.GetName() == "" || u.GetName() == user.Anonymous {
		return false
	}
	return !slices.Contains(u.GetGroups(), user.AllUnauthenticated)
}

// ValueFromEndpoints returns the Alt-Svc value for the kubernetes Endpoints:
// every ready address of the port named "https", sorted so the value is
// stable, each with maxAge. It returns "" while fewer than two servers are
// listed: a lone server has no alternative to offer, and a single-node
// control plane must never send a client to an address it does not serve.
func ValueFromEndpoints(ep *corev1.Endpoints, maxAge time.Duration) string {
	if ep == nil {
		return ""
	}
	var hosts []string
	for _, ss := range ep.Subsets {
		port := int32(0)
		for _, p := range ss.Ports {
			if p.Name == "https" || (len(ss.Ports) == 1 && p.Name == "") {
				port = p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, a := range ss.Addresses {
			if net.ParseIP(a.IP) == nil {
				continue
			}
			h := net.JoinHostPort(a.IP, strconv.Itoa(int(port)))
			if !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
	}
	if len(hosts) < 2 {
		return ""
	}
	slices.Sort(hosts)
	services := make([]altsvc.Service, 0, len(hosts))
	for _, h := range hosts {
		host, port, _ := net.SplitHostPort(h)
		p, _ := strconv.Atoi(port)
		services = append(services, altsvc.Service{Protocol: altsvc.ProtocolHTTP2, Host: host, Port: p, MaxAge: maxAge})
	}
	return altsvc.Format(services)
}

// Advertisement holds the current Alt-Svc value; the informer writes it, the
// filter reads it. The zero value advertises nothing.
type Advertisement struct {
	value atomic.Pointer[string]
}

// Value returns the current Alt-Svc value, "" for none.
func (a *Advertisement) Value() string {
	if v := a.value.Load(); v != nil {
		return *v
	}
	return ""
}

// Set replaces the value; it reports whether it changed.
func (a *Advertisement) Set(v string) bool {
	old := a.value.Swap(&v)
	return old == nil && v != "" || old != nil && *old != v
}

// WithAlternativeServices makes the Alt-Svc header of every response the
// filter's own: the current value for requests that ShouldAdvertise, none for
// the others. Whatever a handler put there is dropped when the header is
// written: a pod, service or node behind a proxy subresource, or an
// aggregated API server, chooses its own headers, and must not be able to
// send clients elsewhere. handler must be inside authentication.
func WithAlternativeServices(handler http.Handler, adv *Advertisement) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		value := ""
		if v := adv.Value(); v != "" {
			if u, ok := request.UserFrom(r.Context()); ok && ShouldAdvertise(r, u) {
				value = v
			}
		}
		hw := &headerWriter{ResponseWriter: w, value: value}
		handler.ServeHTTP(responsewriter.WrapForHTTP1Or2(hw), r)
		if !hw.written {
			// Nothing was written: the server writes the header now.
			SetHeader(w.Header(), value)
		}
	})
}

// headerWriter sets Alt-Svc to value, and only to value, when the response
// header is written.
type headerWriter struct {
	http.ResponseWriter
	value   string
	written bool
}

// Unwrap implements responsewriter.UserProvidedDecorator.
func (w *headerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// WriteHeader implements http.ResponseWriter.
func (w *headerWriter) WriteHeader(code int) {
	if !w.written {
		w.written = true
		SetHeader(w.ResponseWriter.Header(), w.value)
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *headerWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// SetHeader makes value the only Alt-Svc of h; "" removes every one.
func SetHeader(h http.Header, value string) {
	if value == "" {
		delete(h, altsvc.HeaderName)
		return
	}
	h[altsvc.HeaderName] = []string{value}
}

// Update sets adv from ep and records the change in the log and metrics.
func Update(adv *Advertisement, ep *corev1.Endpoints, maxAge time.Duration) {
	v := ValueFromEndpoints(ep, maxAge)
	if adv.Set(v) {
		n := 0
		if v != "" {
			h, _ := altsvc.Parse(v)
			n = len(h.Services)
		}
		advertisedServers.Set(float64(n))
		klog.InfoS("Alternative services changed", "servers", n, "altSvc", v)
	}
}
