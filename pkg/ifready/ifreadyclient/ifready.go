// Package ifreadyclient is the client half of KEP-3028 "Retry during server
// initialization": an option on *rest.Config that makes every request carry
// X-Kubernetes-If-Ready, so a server that has not yet fully initialized answers
// 503 with Retry-After instead of an inconsistent 403 or 404. client-go's own
// retry (429/5xx with Retry-After, up to MaxRetries) then carries the request
// through initialization; nothing here retries by itself.
//
//	cfg, _ := clientcmd.BuildConfigFromFlags("", kubeconfig)
//	obs := ifreadyclient.Enable(cfg)
//	cs := kubernetes.NewForConfigOrDie(cfg)
//	...
//	if obs.Last() == ifready.NotUnderstood { /* server does not implement KEP-3028 */ }
package ifreadyclient

import (
	"net/http"
	"sync/atomic"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/steadyplane/steadyplane/pkg/ifready"
)

// Enable makes every request sent with cfg, and with every config copied from
// it afterwards, carry X-Kubernetes-If-Ready. It composes with any WrapTransport
// already set (that one stays closer to the network). The returned Observer
// records what the server answered.
func Enable(cfg *rest.Config) *Observer {
	obs := &Observer{}
	cfg.WrapTransport = transport.Wrappers(cfg.WrapTransport, func(rt http.RoundTripper) http.RoundTripper {
		return NewRoundTripper(rt, obs)
	})
	return obs
}

// Observer records the X-Kubernetes-Ready answers of the responses a client
// received, so the caller can tell an older server (NotUnderstood) from one
// that honours the header. It is safe for concurrent use.
type Observer struct {
	last   atomic.Int32
	counts [ifready.Unrecognized + 1]atomic.Int64
}

// Last returns the answer of the most recent response, NoAnswer before any.
func (o *Observer) Last() ifready.ServerAnswer { return ifready.ServerAnswer(o.last.Load()) }

// Count returns how many responses gave answer a. Count(Initializing) is how
// many times the server asked the client to wait.
func (o *Observer) Count(a ifready.ServerAnswer) int64 {
	if a < 0 || int(a) >= len(o.counts) {
		return 0
	}
	return o.counts[a].Load()
}

func (o *Observer) record(h http.Header) {
	a := ifready.AnswerFromHeader(h)
	o.last.Store(int32(a))
	o.counts[a].Add(1)
}

// roundTripper adds X-Kubernetes-If-Ready to each request.
type roundTripper struct {
	next http.RoundTripper
	obs  *Observer
}

// NewRoundTripper returns a round tripper that sends every request through next
// with X-Kubernetes-If-Ready set, and records the answers in obs (which may be
// nil). The caller's request is not modified.
func NewRoundTripper(next http.RoundTripper, obs *Observer) http.RoundTripper {
	return &roundTripper{next: next, obs: obs}
}

// RoundTrip implements http.RoundTripper.
func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if _, ok := req.Header[ifready.HeaderIfReady]; !ok {
		req = utilnet.CloneRequest(req) // a RoundTripper must not modify its request
		req.Header[ifready.HeaderIfReady] = []string{"true"}
	}
	resp, err := rt.next.RoundTrip(req)
	if err == nil && rt.obs != nil {
		rt.obs.record(resp.Header)
	}
	return resp, err
}

// WrappedRoundTripper lets client-go reach the transport underneath (to cancel
// requests, or find its TLS configuration).
func (rt *roundTripper) WrappedRoundTripper() http.RoundTripper { return rt.next }

var _ utilnet.RoundTripperWrapper = &roundTripper{}
