package ifreadyfilter

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/steadyplane/steadyplane/pkg/ifready"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		hasHeader, exempt, initialized bool
		want                           Action
	}{
		// The KEP's four cases, on an ordinary path.
		{hasHeader: true, initialized: false, want: Refuse},
		{hasHeader: false, initialized: false, want: Pass},
		{hasHeader: true, initialized: true, want: PassMarkedReady},
		{hasHeader: false, initialized: true, want: Pass},
		// Health and metrics paths are never refused, but still tell the state.
		{hasHeader: true, exempt: true, initialized: false, want: PassMarkedNotReady},
		{hasHeader: true, exempt: true, initialized: true, want: PassMarkedReady},
		{hasHeader: false, exempt: true, initialized: false, want: Pass},
		{hasHeader: false, exempt: true, initialized: true, want: Pass},
	}
	for _, tc := range tests {
		if got := Decide(tc.hasHeader, tc.exempt, tc.initialized); got != tc.want {
			t.Errorf("Decide(header=%v, exempt=%v, initialized=%v) = %v, want %v",
				tc.hasHeader, tc.exempt, tc.initialized, got, tc.want)
		}
	}
}

func TestIsFullReadyzCheck(t *testing.T) {
	tests := map[string]bool{
		"/readyz":                     true,
		"/readyz/":                    true,
		"/readyz?verbose":             true,
		"/readyz?verbose=1":           true,
		"/readyz?exclude=etcd":        false,
		"/readyz?verbose&exclude=foo": false,
		"/readyz?exclude=":            false,
		"/readyz/etcd":                false,
		"/livez":                      false,
		"/healthz":                    false,
		"/api":                        false,
	}
	for target, want := range tests {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		if got := IsFullReadyzCheck(r); got != want {
			t.Errorf("IsFullReadyzCheck(%q) = %v, want %v", target, got, want)
		}
	}
}

// fakeServer stands for the API server behind the filter: /readyz answers
// readyCode, everything else 200 "served".
type fakeServer struct {
	readyCode int
	served    int
}

func (s *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.served++
	if strings.HasPrefix(r.URL.Path, "/readyz") {
		if s.readyCode != http.StatusOK {
			w.WriteHeader(s.readyCode)
		}
		_, _ = w.Write([]byte("readyz"))
		return
	}
	_, _ = w.Write([]byte("served"))
}

func newFilter(t *testing.T, readyCode int) (*fakeServer, *Latch, *clocktesting.FakeClock, http.Handler) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	srv := &fakeServer{readyCode: readyCode}
	latch := NewLatch(clk)
	return srv, latch, clk, WithRetryAfterUntilInitialized(srv, latch, 5*time.Second)
}

func do(h http.Handler, target string, withHeader bool) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	if withHeader {
		r.Header[ifready.HeaderIfReady] = []string{""} // empty value counts
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestFilterKEPCases(t *testing.T) {
	tests := []struct {
		name        string
		initialized bool
		header      bool
		wantCode    int
		wantReady   []string // nil: header absent
		wantServed  bool
		wantRetryAf string
	}{
		{"not initialized, header", false, true, http.StatusServiceUnavailable, []string{"false"}, false, "5"},
		{"not initialized, no header", false, false, http.StatusOK, nil, true, ""},
		{"initialized, header", true, true, http.StatusOK, []string{"true"}, true, ""},
		{"initialized, no header", true, false, http.StatusOK, nil, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, latch, _, h := newFilter(t, http.StatusInternalServerError)
			if tc.initialized {
				latch.Set()
			}
			w := do(h, "/api/v1/namespaces", tc.header)
			if w.Code != tc.wantCode {
				t.Errorf("code = %d, want %d", w.Code, tc.wantCode)
			}
			if got := w.Header().Values(ifready.HeaderReady); !equal(got, tc.wantReady) {
				t.Errorf("%s = %q, want %q", ifready.HeaderReady, got, tc.wantReady)
			}
			if got := w.Header().Get("Retry-After"); got != tc.wantRetryAf {
				t.Errorf("Retry-After = %q, want %q", got, tc.wantRetryAf)
			}
			if (srv.served == 1) != tc.wantServed {
				t.Errorf("served %d times, want served=%v", srv.served, tc.wantServed)
			}
		})
	}
}

func TestRefusalIsAKubernetesStatus(t *testing.T) {
	_, _, _, h := newFilter(t, http.StatusInternalServerError)
	w := do(h, "/api/v1/namespaces", true)
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	var st metav1.Status
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("body %q is not a Status: %v", w.Body.String(), err)
	}
	err := &apierrors.StatusError{ErrStatus: st}
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("reason = %q, want ServiceUnavailable", st.Reason)
	}
	if st.Kind != "Status" || st.APIVersion != "v1" || st.Code != 503 || st.Status != metav1.StatusFailure {
		t.Errorf("unexpected Status %+v", st)
	}
	if !strings.Contains(st.Message, "initializing") {
		t.Errorf("message %q does not say the server is initializing", st.Message)
	}
	if d, ok := apierrors.SuggestsClientDelay(err); !ok || d != 5 {
		t.Errorf("SuggestsClientDelay = %d, %v; want 5, true", d, ok)
	}
}

func TestRetryAfterRounding(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{0, "1"}, {200 * time.Millisecond, "1"}, {1500 * time.Millisecond, "2"}, {5 * time.Second, "5"}, {2 * time.Minute, "120"}} {
		h := WithRetryAfterUntilInitialized(&fakeServer{}, NewLatch(clocktesting.NewFakeClock(time.Now())), tc.d)
		if got := do(h, "/api", true).Header().Get("Retry-After"); got != tc.want {
			t.Errorf("retryAfter %v: Retry-After = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestExemptPathsAreNeverRefused(t *testing.T) {
	for _, path := range []string{"/readyz", "/readyz/etcd", "/livez", "/livez/ping", "/healthz", "/healthz/etcd", "/metrics"} {
		srv, _, _, h := newFilter(t, http.StatusInternalServerError)
		w := do(h, path, true)
		if w.Code == http.StatusServiceUnavailable && w.Header().Get("Retry-After") != "" {
			t.Errorf("%s was refused by the filter", path)
		}
		if srv.served != 1 {
			t.Errorf("%s: server saw %d requests, want 1", path, srv.served)
		}
		if got := w.Header().Get(ifready.HeaderReady); got != "false" {
			t.Errorf("%s: %s = %q, want false", path, ifready.HeaderReady, got)
		}
	}
}

func TestFullReadyzOKSetsTheLatch(t *testing.T) {
	srv, latch, clk, h := newFilter(t, http.StatusInternalServerError)

	do(h, "/readyz", false)
	if latch.IsSet() {
		t.Fatal("latch set by a failing /readyz")
	}
	srv.readyCode = http.StatusOK
	for _, partial := range []string{"/readyz?exclude=etcd", "/readyz/etcd", "/livez", "/healthz"} {
		do(h, partial, false)
		if latch.IsSet() {
			t.Fatalf("latch set by %s, which is not a full readiness check", partial)
		}
	}
	if got := do(h, "/api", true).Code; got != http.StatusServiceUnavailable {
		t.Fatalf("before the full /readyz, code = %d, want 503", got)
	}

	clk.Step(4200 * time.Millisecond)
	w := do(h, "/readyz?verbose", false)
	if w.Code != http.StatusOK || w.Body.String() != "readyz" {
		t.Fatalf("the /readyz answer was changed: %d %q", w.Code, w.Body.String())
	}
	if !latch.IsSet() {
		t.Fatal("latch not set by a full /readyz answering 200")
	}
	select {
	case <-latch.Done():
	default:
		t.Error("Done not closed")
	}
	if got := latch.Elapsed(); got != 4200*time.Millisecond {
		t.Errorf("Elapsed = %v, want 4.2s", got)
	}
	if got := do(h, "/api", true); got.Code != http.StatusOK || got.Header().Get(ifready.HeaderReady) != "true" {
		t.Errorf("after initialization: %d, %s=%q", got.Code, ifready.HeaderReady, got.Header().Get(ifready.HeaderReady))
	}
}

func TestLatchNeverUnlatches(t *testing.T) {
	srv, latch, _, h := newFilter(t, http.StatusOK)
	do(h, "/readyz", false)
	if !latch.IsSet() {
		t.Fatal("latch not set")
	}
	srv.readyCode = http.StatusInternalServerError // etcd went away, or shutdown began
	for i := 0; i < 3; i++ {
		if got := do(h, "/readyz", true).Header().Get(ifready.HeaderReady); got != "true" {
			t.Errorf("after a failing /readyz, %s = %q, want true", ifready.HeaderReady, got)
		}
		if got := do(h, "/api/v1/pods", true); got.Code != http.StatusOK {
			t.Errorf("after a failing /readyz, request refused with %d", got.Code)
		}
	}
	if latch.Set() {
		t.Error("second Set reported it set the latch")
	}
}

func TestReadyzWithoutExplicitWriteHeaderCounts(t *testing.T) {
	latch := NewLatch(clocktesting.NewFakeClock(time.Now()))
	h := WithRetryAfterUntilInitialized(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), latch, time.Second)
	do(h, "/readyz", false)
	if !latch.IsSet() {
		t.Error("an empty 200 from /readyz did not set the latch")
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
