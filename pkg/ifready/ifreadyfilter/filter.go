// Package ifreadyfilter is the server half of KEP-3028 "Retry during server
// initialization": an http.Handler filter that answers requests carrying
// X-Kubernetes-If-Ready with 503 and Retry-After until the server has fully
// initialized, and marks them X-Kubernetes-Ready: true after.
//
// The filter holds no global state: the initialization state is a *Latch the
// caller creates and shares between the filter and the self-prober
// (ProbeUntilInitialized), so several servers in one process stay independent.
package ifreadyfilter

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"

	"github.com/steadyplane/steadyplane/pkg/apiserver/paths"
	"github.com/steadyplane/steadyplane/pkg/ifready"
)

// DefaultRetryAfter is the delay the filter asks clients to wait when no other
// is configured, the one the KEP names.
const DefaultRetryAfter = 5 * time.Second

// NotInitializedMessage is the message of the Status returned while the server
// initializes.
const NotInitializedMessage = "the server is initializing and has not yet answered /readyz with OK; " +
	"it was asked (X-Kubernetes-If-Ready) to refuse requests until then, please try again later"

// Action is what the filter does with one request.
type Action int

const (
	// Pass serves the request untouched.
	Pass Action = iota
	// PassMarkedReady serves the request and sets X-Kubernetes-Ready: true.
	PassMarkedReady
	// PassMarkedNotReady serves the request and sets X-Kubernetes-Ready: false;
	// used for health and metrics paths, which are never refused.
	PassMarkedNotReady
	// Refuse answers 503 with Retry-After and X-Kubernetes-Ready: false.
	Refuse
)

// String names the action, for tests and logs.
func (a Action) String() string {
	switch a {
	case Pass:
		return "Pass"
	case PassMarkedReady:
		return "PassMarkedReady"
	case PassMarkedNotReady:
		return "PassMarkedNotReady"
	case Refuse:
		return "Refuse"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// Decide is the filter's whole decision. A request without the header is never
// touched, so clients that did not opt in see exactly what they saw before. A
// request with it always learns the server's state from X-Kubernetes-Ready;
// it is refused only before initialization and only off the exempt paths.
func Decide(hasHeader, exemptPath, initialized bool) Action {
	switch {
	case !hasHeader:
		return Pass
	case initialized:
		return PassMarkedReady
	case exemptPath:
		return PassMarkedNotReady
	default:
		return Refuse
	}
}

// IsFullReadyzCheck reports whether r asks for every readiness check: the path
// is /readyz and no check is excluded. Only such a request's 200 counts as
// "fully initialized"; /readyz/<check> or ?exclude= may pass while the server
// is still initializing.
func IsFullReadyzCheck(r *http.Request) bool {
	if r.URL.Path != "/readyz" && r.URL.Path != "/readyz/" {
		return false
	}
	return !r.URL.Query().Has("exclude")
}

// Values shared by every response: headers are set by map assignment of these
// slices so that the ready path allocates nothing. net/http only reads them.
var (
	readyTrue  = []string{"true"}
	readyFalse = []string{"false"}
	jsonType   = []string{"application/json"}
	noSniff    = []string{"nosniff"}
)

// WithRetryAfterUntilInitialized wraps handler with the KEP-3028 filter. Until
// latch is set, requests carrying X-Kubernetes-If-Ready (outside the health and
// metrics paths) are answered 503 with "Retry-After: <retryAfter in whole
// seconds, at least 1>", X-Kubernetes-Ready: false and a JSON Status body of
// reason ServiceUnavailable, which client-go decodes as an API error and
// retries. The filter also watches full /readyz answers and sets latch on the
// first 200, so the latch flips as soon as anyone observes readiness.
func WithRetryAfterUntilInitialized(handler http.Handler, latch *Latch, retryAfter time.Duration) http.Handler {
	seconds := int64(retryAfter.Round(time.Second) / time.Second)
	if seconds < 1 {
		seconds = 1
	}
	retryAfterValue := []string{strconv.FormatInt(seconds, 10)}
	body := notInitializedStatus(seconds)

	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		initialized := latch.IsSet()
		_, hasHeader := req.Header[ifready.HeaderIfReady]
		action := Pass
		if hasHeader {
			action = Decide(true, paths.IsHealthOrMetrics(req.URL.Path), initialized)
		}
		switch action {
		case PassMarkedReady:
			w.Header()[ifready.HeaderReady] = readyTrue
		case PassMarkedNotReady:
			w.Header()[ifready.HeaderReady] = readyFalse
		case Refuse:
			rejectedRequests.Inc()
			h := w.Header()
			h[ifready.HeaderReady] = readyFalse
			h["Retry-After"] = retryAfterValue
			h["Content-Type"] = jsonType
			h["X-Content-Type-Options"] = noSniff
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(body)
			return
		}
		if !initialized && IsFullReadyzCheck(req) {
			rec := &statusRecorder{ResponseWriter: w}
			handler.ServeHTTP(responsewriter.WrapForHTTP1Or2(rec), req)
			if rec.status() == http.StatusOK {
				latch.Set()
			}
			return
		}
		handler.ServeHTTP(w, req)
	})
}

// notInitializedStatus is the body of a refusal: a metav1.Status, so that
// client-go surfaces it as an API error (apierrors.IsServiceUnavailable) whose
// details carry the delay.
func notInitializedStatus(retryAfterSeconds int64) []byte {
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  NotInitializedMessage,
		Reason:   metav1.StatusReasonServiceUnavailable,
		Details:  &metav1.StatusDetails{RetryAfterSeconds: int32(retryAfterSeconds)},
		Code:     http.StatusServiceUnavailable,
	}
	b, err := json.Marshal(status)
	if err != nil {
		// A fixed struct of strings and integers always encodes.
		panic(fmt.Sprintf("encoding the not-initialized Status: %v", err))
	}
	return b
}

// statusRecorder remembers the status code written through it.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets responsewriter.WrapForHTTP1Or2 keep the Flusher, CloseNotifier
// and Hijacker of the writer underneath.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) status() int {
	if r.code == 0 {
		return http.StatusOK // nothing written: net/http sends 200
	}
	return r.code
}
