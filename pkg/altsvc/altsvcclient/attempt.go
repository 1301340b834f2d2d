package altsvcclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
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
	// AtMostOnce is true for a write that takes effect at most once however
	// often it is sent (see AtMostOnce); it is only looked at, and only
	// set, for a write that reached its host and failed there.
	AtMostOnce bool
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
	// OutcomeUnknown is true when the attempt reached its host and its
	// answer was lost, for a request that may change something: the host
	// may have carried it out, and the caller must not be told otherwise
	// (see SettlesUnknown).
	OutcomeUnknown bool
}

// AfterAttempt decides what follows one attempt, for requests and for the
// connect step of exec, attach and port-forward alike. An answer is delivered
// unless it is a KEP-3028 refusal that another host may do better than; an
// error is given up on when the caller ended the request, when it is not the
// host's fault, or when sending again could duplicate the request
// (MayResend, or for a write that reached its host, AtMostOnce); otherwise
// the next host is tried.
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
	d.OutcomeUnknown = a.Connected && !safeMethod(a.Method)
	if !MayResend(a.Method, a.Connected, a.BodyReplayable) && !(a.AtMostOnce && a.BodyReplayable) {
		d.Verdict = GiveUp
	}
	return d
}

// safeMethod tells whether a request of method changes nothing on the
// server.
func safeMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, "":
		return true
	}
	return false
}

// SettlesUnknown tells whether an answer with status to a write sent again
// after an earlier copy's outcome was lost tells the caller the truth as
// it is: a success (the object is as the write asked: an update took
// effect through this copy, so not through the other, see AtMostOnce; a
// delete's object is gone or going), or a refusal of the request's bytes
// themselves, which the first copy met too (too large, a media type the
// server does not take). Every other answer may be the first copy's doing:
// a conflict or a missing object plainly, and a 400, 403 or 422 too, since
// admission (webhooks included) sees the object as the first copy left
// it; an error or a throttle settles nothing. The outcome stays unknown.
func SettlesUnknown(status int) bool {
	switch {
	case status >= 200 && status < 300:
		return true
	case status == http.StatusRequestEntityTooLarge, status == http.StatusUnsupportedMediaType:
		return true
	}
	return false
}

// attempter is one way of sending a request to one host: the request path
// (roundTripper) or an upgrading connect (upgradeRoundTripper).
type attempter interface {
	// attempt sends req to host and reports how far it got (see Phase);
	// last is true when no host follows host in the plan.
	attempt(req *http.Request, host, original string, last bool) (*http.Response, Phase, error)
	// classify tells what an attempt's error says about the host.
	classify(err error, phase Phase) Failure
	// accept takes delivery of a successful answer from host before the
	// caller sees it (buffering its body, say); an error fails the attempt.
	accept(req *http.Request, resp *http.Response, pool *Pool, host string) error
}

// outcome is how one attempt of a request on one host ended.
type outcome struct {
	host string
	resp *http.Response
	err  error
	at   Attempt
	wait time.Duration // a refusal's Retry-After
	// done releases the attempt's context, once its answer is delivered and
	// read (nil when the attempt ran on the request's own context).
	done context.CancelFunc
}

// delivers tells whether o is an answer the caller gets as it is: any
// answer but a KEP-3028 refusal.
func (o *outcome) delivers() bool { return o.at.Responded && o.at.Failure != NotReadyFailure }

// discard frees what a losing attempt holds.
func (o *outcome) discard() {
	if o.resp != nil && o.resp.Body != nil {
		o.resp.Body.Close()
	}
	if o.done != nil {
		o.done()
	}
}

// send makes one attempt of req on host through a, and accepts a delivered
// answer (a.accept), so that a body that breaks while it is read ahead fails
// the attempt.
func send(a attempter, req *http.Request, pool *Pool, host, original string, last bool) outcome {
	resp, phase, err := a.attempt(req, host, original, last)
	o := outcome{host: host, resp: resp, err: err, at: Attempt{Responded: err == nil, Method: req.Method, BodyReplayable: bodyReplayable(req), Last: last, Connected: phase == Connected}}
	if err == nil {
		o.at.Failure, o.wait = ClassifyResponse(req.URL.Path, resp.StatusCode, resp.Header)
		if o.at.Failure != NotReadyFailure && mayBeShuttingDown(req.URL.Path, resp) {
			start := peekBody(resp, len(shutdownMessage))
			if down, wait := ShuttingDown(req.URL.Path, resp.StatusCode, resp.Header, start); down {
				o.at.Failure, o.wait = NotReadyFailure, wait
			}
		}
		if o.at.Failure != NotReadyFailure {
			if o.err = a.accept(req, resp, pool, host); o.err != nil {
				o.resp = nil
				o.at.Responded, phase, o.at.Connected = false, Connected, true
			}
		}
	}
	if !o.at.Responded {
		o.at.Canceled = req.Context().Err() != nil
		o.at.Failure = a.classify(o.err, phase)
		if o.at.Connected && !o.at.Canceled && o.at.Failure != NotHostFailure {
			o.at.AtMostOnce = atMostOnce(req)
		}
	}
	return o
}

// mayBeShuttingDown tells, from resp's headers alone, whether its body is
// worth a look for ShuttingDown: only then is a body read ahead, and only a
// short one of known length (http.Error's), which has arrived whole.
func mayBeShuttingDown(path string, resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests && resp.ContentLength > 0 && resp.ContentLength <= 512 &&
		resp.Header.Get("Retry-After") != "" && MayLearnFrom(path) && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain")
}

// peekBody returns up to n bytes from the start of resp's body and leaves
// the body whole for whoever reads it.
func peekBody(resp *http.Response, n int) []byte {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	buf := make([]byte, n)
	got, _ := io.ReadFull(resp.Body, buf)
	resp.Body = peekedBody{Reader: io.MultiReader(bytes.NewReader(buf[:got]), resp.Body), Closer: resp.Body}
	return buf[:got]
}

type peekedBody struct {
	io.Reader
	io.Closer
}

// MayHedge tells whether a request may be sent to a second host while the
// first has not answered yet: only a read (GET, HEAD) without a body, whose
// answer is not open-ended (a watch, a followed log), that upgrades nothing
// and whose answer does not come from a backend (proxied to a pod, service
// or node, or a container's log read from its node: a slow answer there is
// the backend's, and a second API server would ask it again). Two copies of
// it cost the servers a read, never a write.
func MayHedge(method string, hasBody, streaming, upgrade, fromBackend bool) bool {
	return (method == http.MethodGet || method == http.MethodHead) && !hasBody && !streaming && !upgrade && !fromBackend
}

// hedgeable is MayHedge of req.
func hedgeable(req *http.Request) bool {
	hasBody := req.Body != nil && req.Body != http.NoBody
	return MayHedge(req.Method, hasBody, isStreaming(req), req.Header.Get("Upgrade") != "", answeredByBackend(req))
}

// answeredByBackend tells whether req's answer comes from a backend, not
// the API server: proxied to a pod, service or node, or a container's log
// read from its node. Its time is the backend's.
func answeredByBackend(req *http.Request) bool {
	return !MayLearnFrom(req.URL.Path) || strings.HasSuffix(req.URL.Path, "/log")
}

// winsRace tells whether o ends the race for its request: an answer the
// caller gets as it is, and not a sign of an overloaded or failing server
// (5xx, 429), which the other attempt may do better than.
func (o *outcome) winsRace() bool {
	return o.delivers() && o.resp.StatusCode < 500 && o.resp.StatusCode != http.StatusTooManyRequests
}

// recordLoser records an attempt that lost a race but had failed by
// itself first (not because the race ended it): its host's failure counts
// as any other attempt's.
func recordLoser(pool *Pool, o outcome) {
	if !o.at.Responded && !o.at.Canceled {
		judge(pool, o)
	}
}

// judge decides what follows attempt o (AfterAttempt), counts it in the
// metrics and moves its host through its states when the failure is the
// host's.
func judge(pool *Pool, o outcome) Decision {
	d := AfterAttempt(o.at)
	metrics.requests.WithLabelValues(o.host, d.Result).Inc()
	if d.CountsAgainstHost {
		failure := o.err
		if o.at.Responded {
			failure = errors.New("answered 503 with X-Kubernetes-Ready: false")
			if o.resp != nil && o.resp.StatusCode == http.StatusTooManyRequests {
				failure = errors.New("answered 429: the API server is shutting down")
			}
		}
		recordFailure(pool, o.host, o.at.Failure, failure, o.wait)
	}
	return d
}

// race sends req to first and, when no answer came within after, to second
// as well: a host that is black-holed (a partition: nothing answers, not
// even a reset) would otherwise hold the read until the HTTP/2 health check
// gives up on its connection. It returns the attempts to judge, in order;
// an attempt the other won over is not among them (its own failure, if it
// had one, is recorded). hedged tells whether second was tried.
func race(a attempter, req *http.Request, pool *Pool, first, second, original string, after time.Duration, secondIsLast bool) (outs []outcome, hedged bool) {
	ctx0, cancel0 := context.WithCancel(req.Context())
	type hedge struct {
		cancel context.CancelFunc
		out    chan outcome
	}
	// claimed is set by the attempt that wins (winsRace) first; only it
	// may end the other. finished is set when the first attempt is over:
	// a timer firing then sends no hedge.
	var claimed, finished atomic.Bool
	started := make(chan hedge, 1)
	timer := time.AfterFunc(after, func() {
		if finished.Load() || req.Context().Err() != nil {
			started <- hedge{}
			return
		}
		if !pool.hedges.Allow() {
			metrics.hedges.WithLabelValues("over-budget").Inc()
			started <- hedge{}
			return
		}
		metrics.hedges.WithLabelValues("sent").Inc()
		ctx1, cancel1 := context.WithCancel(req.Context())
		r1 := req.Clone(ctx1) // before the caller may return and reuse req
		h := hedge{cancel: cancel1, out: make(chan outcome, 1)}
		started <- h
		o := send(a, r1, pool, second, original, secondIsLast)
		o.done = cancel1
		if o.winsRace() && claimed.CompareAndSwap(false, true) {
			cancel0() // the first attempt's caller is waiting on it
		}
		h.out <- o
	})
	o0 := send(a, req.WithContext(ctx0), pool, first, original, false)
	finished.Store(true)
	o0.done = cancel0
	if timer.Stop() {
		return []outcome{o0}, false
	}
	h := <-started
	if h.out == nil {
		return []outcome{o0}, false
	}
	if o0.winsRace() && claimed.CompareAndSwap(false, true) {
		h.cancel()
		go func() {
			o := <-h.out
			recordLoser(pool, o)
			o.discard()
		}()
		metrics.requests.WithLabelValues(second, "hedge-lost").Inc()
		return []outcome{o0}, true
	}
	o1 := <-h.out
	if claimed.Load() {
		// The hedge won, ending the first attempt (or finding it failed).
		recordLoser(pool, o0)
		o0.discard()
		metrics.requests.WithLabelValues(first, "hedge-lost").Inc()
		klog.V(2).InfoS("A hedged read answered first", "slow", first, "answered", second, "after", after)
		return []outcome{o1}, true
	}
	// Neither won: both are judged, in order.
	return []outcome{o0, o1}, true
}

// releaseOnClose makes closing resp's body release the attempt's context.
func releaseOnClose(resp *http.Response, done context.CancelFunc) {
	if done == nil {
		return
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		done()
		return
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, done: done}
}

// releasingBody releases an attempt's context when it is closed.
type releasingBody struct {
	io.ReadCloser
	done context.CancelFunc
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.done()
	return err
}

// tryHosts is the one attempt loop: it sends req to the hosts of plan in
// order, each through a, until AfterAttempt says to stop, and records every
// attempt in the pool and the metrics. It returns the answer and the host
// that gave it. When every host failed, the caller sees the error of the
// host it configured, as it would without the option, or else the last.
// With hedgeAfter > 0, a read that MayHedge goes to the next host too when
// the one tried has not answered within hedgeAfter (race).
func tryHosts(a attempter, req *http.Request, pool *Pool, plan []string, original string, learn bool, hedgeAfter time.Duration) (*http.Response, string, error) {
	var lastErr, originalErr error
	var refusal *http.Response // the last KEP-3028 refusal, returned if no host does better
	// unknown is set by the first attempt that reached its host and lost
	// its answer, for a write: from then on the caller learns only what
	// settles it (SettlesUnknown), or that its outcome is unknown.
	var unknown *OutcomeUnknownError
	hedge := hedgeAfter > 0 && hedgeable(req)
	for i := 0; i < len(plan); i++ {
		if i > 0 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, "", errors.Join(lastErr, fmt.Errorf("replaying the request body: %w", err))
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
		var outs []outcome
		if hedge && i+1 < len(plan) {
			var hedged bool
			outs, hedged = race(a, req, pool, plan[i], plan[i+1], original, hedgeAfter, i+2 == len(plan))
			if hedged {
				i++
			}
		} else {
			outs = []outcome{send(a, req, pool, plan[i], original, i == len(plan)-1)}
		}
		for k, o := range outs {
			host, resp, err := o.host, o.resp, o.err
			if !o.at.Responded {
				lastErr = err
				if host == original {
					originalErr = err
				}
			}
			d := judge(pool, o)
			if d.OutcomeUnknown && unknown == nil {
				unknown = &OutcomeUnknownError{Host: host, Err: err}
			}
			switch d.Verdict {
			case Deliver:
				for _, rest := range outs[k+1:] {
					rest.discard()
				}
				if unknown != nil {
					if !SettlesUnknown(resp.StatusCode) {
						unknown.Then = fmt.Sprintf("sent again to %s, which answered %s", host, resp.Status)
						o.discard()
						if refusal != nil {
							refusal.Body.Close()
						}
						return nil, "", reportUnknown(unknown)
					}
					metrics.unknowns.WithLabelValues("settled").Inc()
					klog.InfoS("A write whose answer was lost was sent again and settled", "lost", unknown.Host, "answered", host, "status", resp.StatusCode)
				}
				releaseOnClose(resp, o.done)
				if o.at.Failure == NotReadyFailure {
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
				if o.done != nil {
					o.done()
				}
			case TryNext:
				if o.done != nil {
					o.done()
				}
			case GiveUp:
				for _, rest := range outs[k:] {
					rest.discard()
				}
				if refusal != nil {
					refusal.Body.Close()
				}
				if unknown != nil {
					return nil, "", reportUnknown(unknown)
				}
				return nil, "", err
			}
		}
	}
	if unknown != nil {
		// Not the refusal: client-go would send the write again after it,
		// and whatever that copy met would hide the first copy's fate.
		if refusal != nil {
			refusal.Body.Close()
		}
		return nil, "", reportUnknown(unknown)
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

// reportUnknown counts and logs a write whose outcome is unknown, and
// returns the error the caller gets: e, unless client-go itself reads the
// attempt's error to decide on a retry (ClientGoReads), which then goes to
// the caller as it is, so that client-go's policy holds.
func reportUnknown(e *OutcomeUnknownError) error {
	if ClientGoReads(e.Err) {
		metrics.unknowns.WithLabelValues("passed-through").Inc()
		klog.InfoS("A write's answer was lost: its outcome is unknown; its error goes to client-go as it is", "host", e.Host, "err", e.Err, "then", e.Then)
		return e.Err
	}
	metrics.unknowns.WithLabelValues("reported").Inc()
	klog.InfoS("A write's answer was lost: its outcome is unknown", "host", e.Host, "err", e.Err, "then", e.Then)
	return e
}

// ClientGoReads tells whether client-go's retry reads err by what it is:
// an end of file, a reset connection or a lost HTTP/2 connection, which
// its Watch sends again whatever the verb (and its Do for a GET). It
// compares some of them by identity, which a wrapping error would hide.
func ClientGoReads(err error) bool {
	return utilnet.IsProbableEOF(err) || utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err)
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
