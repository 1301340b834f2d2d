package ifreadyfilter

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/steadyplane/steadyplane/pkg/apiserver/paths"
	"github.com/steadyplane/steadyplane/pkg/ifready"
)

// FuzzFilter feeds arbitrary paths, queries and header values through the
// filter before and after initialization and checks its invariants: it never
// panics, never marks a request that did not opt in, never refuses a health or
// metrics path, and refuses only opted-in requests before initialization.
func FuzzFilter(f *testing.F) {
	for _, seed := range []struct {
		path, query, value string
		withHeader, init   bool
	}{
		{"/api/v1/namespaces", "", "", true, false},
		{"/readyz", "exclude=etcd", "true", true, false},
		{"/readyz/", "verbose", "", false, false},
		{"/healthz/../api", "", "x", true, true},
		{"/metrics", "", "\x00", true, false},
		{"", "%zz", "", true, false},
	} {
		f.Add(seed.path, seed.query, seed.value, seed.withHeader, seed.init)
	}
	f.Fuzz(func(t *testing.T, path, query, value string, withHeader, initialized bool) {
		latch := NewLatch(clocktesting.NewFakeClock(time.Unix(0, 0)))
		if initialized {
			latch.Set()
		}
		served := false
		h := WithRetryAfterUntilInitialized(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served = true
		}), latch, 3*time.Second)
		req := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{}}
		if withHeader {
			req.Header[ifready.HeaderIfReady] = []string{value}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)

		_, marked := w.Header()[ifready.HeaderReady]
		refused := w.Code == http.StatusServiceUnavailable && !served
		switch {
		case !withHeader && (marked || refused):
			t.Fatalf("request without the header was touched: code %d, marked %v", w.Code, marked)
		case withHeader && !marked:
			t.Fatalf("opted-in request not marked")
		case refused && (initialized || paths.IsHealthOrMetrics(path)):
			t.Fatalf("refused %q (initialized %v)", path, initialized)
		case withHeader && !initialized && !paths.IsHealthOrMetrics(path) && !refused:
			t.Fatalf("opted-in request to %q served before initialization", path)
		case refused && w.Header().Get("Retry-After") != "3":
			t.Fatalf("refusal without Retry-After: 3")
		}
	})
}
