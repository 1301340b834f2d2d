package altsvcclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A request that may not be hedged (a write, a read with a body) waits on
// the one host it went to. A host that is black-holed or paused answers
// nothing, not even a reset, and the request would wait until the HTTP/2
// health check gives up on the connection, seconds later; one whose etcd
// is paused holds it until etcd resumes. So a request without an answer
// after Options.StallCheckAfter has the client check its host: a quorum
// read there within Options.StallCheckTimeout (readStorage). A host that
// answers keeps the request (it is slow, not gone: a write's answer may
// take seconds); one that does not ends it with an UnansweredError, and is
// blocked like any host that cannot be reached.

// UnansweredError is the error of an attempt ended because its host
// stopped answering while the request waited (see StallCheckAfter). Had
// the request reached the host, it may have been carried out.
type UnansweredError struct {
	// Host is the API server the request waited on.
	Host string
	// Waited is how long the request waited.
	Waited time.Duration
	// Check is why the host was found gone.
	Check error
}

func (e *UnansweredError) Error() string {
	return fmt.Sprintf("API server %s stopped answering: no answer after %s, and a check of it failed: %v", e.Host, e.Waited.Round(time.Millisecond), e.Check)
}

// OutcomeUnknownError is the error of a request that may have changed
// something on the server (any method but GET, HEAD and OPTIONS) and whose
// answer was lost after it reached a server: the server may or may not
// have carried it out. Err is the failure of the attempt that reached it.
type OutcomeUnknownError struct {
	// Host is the API server that may have carried the request out.
	Host string
	// Err is that attempt's failure.
	Err error
	// Then says what became of the request when it was sent again (an
	// AtMostOnce write), if it was.
	Then string
}

func (e *OutcomeUnknownError) Error() string {
	msg := fmt.Sprintf("outcome unknown: the request reached API server %s, which may or may not have carried it out before its answer was lost: %v", e.Host, e.Err)
	if e.Then != "" {
		msg += "; " + e.Then
	}
	return msg
}

// Unwrap returns the attempt's failure, so that callers that look for a
// lost connection in the error (net.IsConnectionReset, say) still find it.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// IsOutcomeUnknown tells whether err says that a request's outcome is
// unknown (OutcomeUnknownError).
func IsOutcomeUnknown(err error) bool {
	var e *OutcomeUnknownError
	return errors.As(err, &e)
}

// liveness checks hosts for the requests that wait on them: one check of a
// host at a time, whose result every request waiting on it shares, and a
// result is kept for fresh, so that many slow writes to one server cost it
// one read per fresh, not one each.
type liveness struct {
	fresh   time.Duration
	timeout time.Duration

	mu     sync.Mutex
	checks map[string]*hostCheck
}

// hostCheck is one check of a host: done is closed once err is known.
type hostCheck struct {
	done chan struct{}
	err  error
	at   time.Time
}

func newLiveness(fresh, timeout time.Duration) *liveness {
	return &liveness{fresh: fresh, timeout: timeout, checks: map[string]*hostCheck{}}
}

// check returns nil when host answered a check that ended within fresh, or
// the check's error; it starts a check (probe) when there is none, and
// waits for it unless ctx ends first (nil then: the request is over
// anyway).
func (l *liveness) check(ctx context.Context, host string, probe func(ctx context.Context) error) error {
	l.mu.Lock()
	c := l.checks[host]
	if c == nil || (!c.at.IsZero() && time.Since(c.at) >= l.fresh) {
		c = &hostCheck{done: make(chan struct{})}
		l.checks[host] = c
		go func() {
			// Not the request's context: other requests share the check.
			pctx, cancel := context.WithTimeout(context.Background(), l.timeout)
			err := probe(pctx)
			cancel()
			result := "answered"
			if err != nil {
				result = "gone"
			}
			metrics.checks.WithLabelValues(result).Inc()
			l.mu.Lock()
			c.err, c.at = err, time.Now()
			l.mu.Unlock()
			close(c.done)
		}()
	}
	l.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return nil
	}
}

// readStorage is the liveness probe of a host for req, a request waiting
// on it: a quorum read, on the same host, of what req is about (its path:
// the object it updates or deletes; for a create, its collection, one
// item at most, its metadata only), with req's credentials. An API server
// that is black-holed or paused answers nothing, and one whose etcd is
// stalled (paused, cut off from quorum) holds the read as it holds the
// write; one that is only slow to write answers it. Any answer counts,
// even a refusal or an error: a server that answers is there, and only
// silence is a reason to leave it. (A write to a subresource that cannot
// be read, an eviction say, is answered at once without its storage: for
// those a stalled etcd goes unseen.) read is built by storageRead.
func readStorage(ctx context.Context, t http.RoundTripper, read *http.Request) error {
	resp, err := t.RoundTrip(read.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("a read of its storage got no answer: %w", err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return nil
}

// metadataOnly asks for an object's or a list's metadata alone: the check
// must not pull whole Secrets every StallCheckAfter.
const metadataOnly = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

// storageRead is readStorage's request for req, built from a copy of its
// URL and headers: the check may run after req's round trip returned.
func storageRead(req *http.Request) (*http.Request, error) {
	u := *req.URL
	// A collection (a create's, a deletecollection's) is read one item at
	// most; a single object ignores the limit.
	u.RawQuery = "limit=1"
	read, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	read.Host = req.Host
	for k, v := range req.Header {
		if !strings.HasPrefix(k, "Content-") {
			read.Header[k] = slices.Clone(v)
		}
	}
	read.Header.Set("Accept", metadataOnly)
	return read, nil
}

// watchesStall tells whether an attempt of req is watched for a host that
// stops answering: a request that waits for one answer from the API
// server's own storage and cannot be hedged. A watch or a followed log
// stays open by design, an upgrade is its own protocol, a hedged read
// moves on by itself (race), and an answer from a backend (a proxy, a
// container's log) is as slow as the backend: a check of the API server
// would say nothing of it.
func watchesStall(req *http.Request) bool {
	return !isStreaming(req) && req.Header.Get("Upgrade") == "" && !answeredByBackend(req) && !hedgeable(req)
}

// Attempt states of roundTripWatched: the answer and the check race to
// set it.
const (
	waiting int32 = iota
	answered
	abandoned
)

// roundTripWatched sends req through t, and ends it with an
// UnansweredError when host fails a liveness check while the request
// waits: a check after every StallCheckAfter without an answer.
func (ts *transports) roundTripWatched(t *http.Transport, req *http.Request, host string) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	start := time.Now()
	var state atomic.Int32
	var gone error // set before state becomes abandoned
	// Armed below, once timer is set: the function reads it.
	var timer *time.Timer
	timer = time.AfterFunc(time.Hour, func() {
		if state.Load() != waiting {
			return
		}
		read, err := storageRead(req)
		if err != nil {
			return // no check, the request waits as it would without one
		}
		if err := ts.live.check(ctx, host, func(ctx context.Context) error { return readStorage(ctx, t, read) }); err != nil {
			gone = &UnansweredError{Host: host, Waited: time.Since(start), Check: err}
			if state.CompareAndSwap(waiting, abandoned) {
				cancel()
			}
			return
		}
		if state.Load() == waiting {
			timer.Reset(ts.opts.StallCheckAfter)
		}
	})
	timer.Reset(ts.opts.StallCheckAfter)
	resp, err := t.RoundTrip(req.WithContext(ctx))
	timer.Stop()
	if !state.CompareAndSwap(waiting, answered) {
		// Given up on: an answer that came meanwhile is dropped too (the
		// caller is told the outcome is unknown, which is still true).
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		if err := req.Context().Err(); err != nil {
			return nil, err // the caller's own end came too
		}
		return nil, gone
	}
	if err != nil {
		cancel()
		return nil, err
	}
	releaseOnClose(resp, cancel)
	return resp, nil
}
