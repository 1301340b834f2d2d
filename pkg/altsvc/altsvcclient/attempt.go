package altsvcclient

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/altsvc"
)

// Verdict is what the attempt loop does after one attempt.
type Verdict int

const (
	// Deliver: hand this attempt's response to the caller.
	Deliver Verdict = iota
	// KeepAndTryNext: the host refused the request unprocessed (KEP-3028);
	// keep its answer in case no other host does better, and try the next.
	KeepAndTryNext
	// TryNext: the attempt failed on the host's side and may be sent again;
	// try the next host.
	TryNext
	// GiveUp: return this attempt's error to the caller; no other host would
	// do better, or sending again could duplicate the request.
	GiveUp
)

func (v Verdict) String() string {
	switch v {
	case Deliver:
		return "Deliver"
	case KeepAndTryNext:
		return "KeepAndTryNext"
	case TryNext:
		return "TryNext"
	case GiveUp:
		return "GiveUp"
	}
	return "Unknown"
}

// Attempt is what AfterAttempt decides from: how one attempt of a request on
// one host ended.
type Attempt struct {
	// Responded is true when the host answered (Failure is then
	// ClassifyResponse's), false when the attempt ended in an error
	// (Failure is then Classify's).
	Responded bool
	// Failure is what the answer or the error says about the host.
	Failure Failure
	// Canceled is true when the request's own context has ended.
	Canceled bool
	// Connected is true when the request reached a connection (see Phase).
	Connected bool
	// Method is the request's method.
	Method string
	// BodyReplayable is true when the request's body can be produced again.
	BodyReplayable bool
	// Last is true on the last host of the plan.
	Last bool
}

// Decision is AfterAttempt's answer.
type Decision struct {
	// Verdict is what to do next.
	Verdict Verdict
	// CountsAgainstHost is true when the attempt's failure moves the host
	// through its state machine (Pool.failed).
	CountsAgainstHost bool
	// Result is the attempt's label in the requests metric.
	Result string
}

// AfterAttempt decides what follows one attempt, for requests and for the
// connect step of exec, attach and port-forward alike. An answer is delivered
// unless it is a KEP-3028 refusal that another host may do better than; an
// error is given up on when the caller ended the request, when it is not the
// host's fault, or when sending again could duplicate the request
// (MayResend); otherwise the next host is tried.
func AfterAttempt(a Attempt) Decision {
	if a.Responded {
		if a.Failure != NotReadyFailure {
			return Decision{Verdict: Deliver, Result: "ok"}
		}
		d := Decision{Verdict: KeepAndTryNext, CountsAgainstHost: true, Result: NotReadyFailure.String()}
		if a.Last || !a.BodyReplayable {
			d.Verdict = Deliver // client-go's retry honours its Retry-After
		}
		return d
	}
	if a.Canceled {
		return Decision{Verdict: GiveUp, Result: "canceled"}
	}
	if a.Failure == NotHostFailure {
		return Decision{Verdict: GiveUp, Result: a.Failure.String()}
	}
	d := Decision{Verdict: TryNext, CountsAgainstHost: true, Result: a.Failure.String()}
	if !MayResend(a.Method, a.Connected, a.BodyReplayable) {
		d.Verdict = GiveUp
	}
	return d
}

// attempter is one way of sending a request to one host: the request path
// (roundTripper) or an upgrading connect (upgradeRoundTripper).
type attempter interface {
	// attempt sends req to host and reports how far it got (see Phase).
	attempt(req *http.Request, host, original string) (*http.Response, Phase, error)
	// classify tells what an attempt's error says about the host.
	classify(err error, phase Phase) Failure
	// accept takes delivery of a successful answer from host before the
	// caller sees it (buffering its body, say); an error fails the attempt.
	accept(req *http.Request, resp *http.Response, pool *Pool, host string) error
}

// tryHosts is the one attempt loop: it sends req to the hosts of plan in
// order, each through a, until AfterAttempt says to stop, and records every
// attempt in the pool and the metrics. It returns the answer and the host
// that gave it. When every host failed, the caller sees the error of the
// host it configured, as it would without the option, or else the last.
//
// Hedged reads would start here (a second attempt on the next host while the
// first is slow), deciding through the same AfterAttempt.
func tryHosts(a attempter, req *http.Request, pool *Pool, plan []string, original string, learn bool) (*http.Response, string, error) {
	var lastErr, originalErr error
	var refusal *http.Response // the last KEP-3028 refusal, returned if no host does better
	for i, host := range plan {
		if i > 0 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, "", errors.Join(lastErr, fmt.Errorf("replaying the request body: %w", err))
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
		resp, phase, err := a.attempt(req, host, original)
		at := Attempt{Responded: err == nil, Method: req.Method, BodyReplayable: bodyReplayable(req), Last: i == len(plan)-1, Connected: phase == Connected}
		var wait time.Duration
		if err == nil {
			at.Failure, wait = ClassifyResponse(req.URL.Path, resp.StatusCode, resp.Header)
			if at.Failure != NotReadyFailure {
				if err = a.accept(req, resp, pool, host); err != nil {
					at.Responded, phase, at.Connected = false, Connected, true
				}
			}
		}
		if !at.Responded {
			at.Canceled = req.Context().Err() != nil
			at.Failure = a.classify(err, phase)
			lastErr = err
			if host == original {
				originalErr = err
			}
		}
		d := AfterAttempt(at)
		metrics.requests.WithLabelValues(host, d.Result).Inc()
		if d.CountsAgainstHost {
			failure := err
			if at.Responded {
				failure = errors.New("answered 503 with X-Kubernetes-Ready: false")
			}
			recordFailure(pool, host, at.Failure, failure, wait)
		}
		switch d.Verdict {
		case Deliver:
			if at.Failure == NotReadyFailure {
				return resp, host, nil
			}
			if refusal != nil {
				refusal.Body.Close()
			}
			var altSvc []string
			if learn {
				altSvc = resp.Header.Values(altsvc.HeaderName)
			}
			if prev := pool.succeeded(host, original, altSvc); prev != "" {
				metrics.switches.Inc()
				klog.InfoS("Switched API server", "from", prev, "to", host)
			}
			return resp, host, nil
		case KeepAndTryNext:
			refusal = keepRefusal(resp)
		case GiveUp:
			return nil, "", err
		}
	}
	if refusal != nil {
		// Every host was either refusing or down: client-go's retry honours
		// the refusal's Retry-After.
		return refusal, "", nil
	}
	if originalErr != nil {
		return nil, "", originalErr
	}
	return nil, "", lastErr
}

// recordFailure moves host through its state machine after a failure and
// counts the block, if the failure started one.
func recordFailure(pool *Pool, host string, f Failure, err error, wait time.Duration) {
	if pool.failed(host, f, err, wait) {
		metrics.blocks.WithLabelValues(f.String()).Inc()
		klog.InfoS("Blocked API server", "host", host, "failure", f, "err", err, "forever", f == CertificateFailure)
	}
	metrics.blocked.Set(float64(pool.BlockedCount()))
}
