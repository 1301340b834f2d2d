// Package patient makes an informer's list and watch wait out a short API
// server restart instead of failing at once.
//
// A client-go reflector backs off after every failed list or watch: 0.8s
// doubling to 30s (plus up to 100% jitter), reset only after two quiet
// minutes. A revision rollout that falls back restarts the API server three
// times within seconds, so a reflector that fails through each restart ends
// up waiting 30-60s after the API server is back, and the informer's
// owner does not see a new pod (the next revision's installer) for that
// long. Retrying a connection failure here, at a short fixed interval,
// keeps those failures from reaching the reflector's backoff.
package patient

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Options bound the waiting.
type Options struct {
	// Interval is the wait between two attempts.
	Interval time.Duration
	// Patience is how long one list or watch is retried before its error
	// goes to the reflector (whose backoff then takes over).
	Patience time.Duration
}

// DefaultOptions retry every half second for up to a minute: an API server
// restart, a fallback included, is over within that on 2 cores.
var DefaultOptions = Options{Interval: 500 * time.Millisecond, Patience: time.Minute}

// Retried tells whether err is an API server that is away for a moment
// (down, restarting, shedding load), as opposed to an answer: a 410 Gone or
// a 403 goes to the reflector as it is.
func Retried(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err)
}

// ListerWatcher wraps lw so that its List and Watch retry what Retried
// says, every o.Interval for up to o.Patience, until ctx ends.
func ListerWatcher(ctx context.Context, lw cache.ListerWatcher, o Options) cache.ListerWatcher {
	return &listerWatcher{ctx: ctx, lw: lw, o: o}
}

type listerWatcher struct {
	ctx context.Context
	lw  cache.ListerWatcher
	o   Options
}

func (p *listerWatcher) List(options metav1.ListOptions) (runtime.Object, error) {
	return retry(p.ctx, p.o, "list", func() (runtime.Object, error) { return p.lw.List(options) })
}

func (p *listerWatcher) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return retry(p.ctx, p.o, "watch", func() (watch.Interface, error) { return p.lw.Watch(options) })
}

// retry calls f until it succeeds, fails with what Retried does not retry,
// o.Patience has passed or ctx ends; it returns f's last answer.
func retry[T any](ctx context.Context, o Options, what string, f func() (T, error)) (T, error) {
	deadline := time.Now().Add(o.Patience)
	for attempt := 1; ; attempt++ {
		v, err := f()
		if !Retried(err) || !time.Now().Add(o.Interval).Before(deadline) {
			if err == nil && attempt > 1 {
				klog.V(2).InfoS("API server answers again", "request", what, "attempts", attempt)
			}
			return v, err
		}
		if attempt == 1 {
			klog.V(2).InfoS("API server away; retrying before the informer backs off", "request", what, "err", err, "patience", o.Patience)
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(o.Interval):
		}
	}
}
