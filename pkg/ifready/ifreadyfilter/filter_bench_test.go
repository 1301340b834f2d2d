package ifreadyfilter

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/steadyplane/steadyplane/pkg/ifready"
)

// reusedWriter is a ResponseWriter that allocates nothing per request, so the
// benchmarks count the filter's allocations alone.
type reusedWriter struct {
	h    http.Header
	code int
}

func (w *reusedWriter) Header() http.Header         { return w.h }
func (w *reusedWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *reusedWriter) WriteHeader(code int)        { w.code = code }

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

func benchmarkFilter(b *testing.B, h http.Handler, r *http.Request, wantCode int) {
	w := &reusedWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	b.StopTimer()
	if w.code != wantCode {
		b.Fatalf("code = %d, want %d", w.code, wantCode)
	}
}

func initializedFilter() http.Handler {
	l := NewLatch(clock.RealClock{})
	l.Set()
	return WithRetryAfterUntilInitialized(okHandler, l, 5*time.Second)
}

// BenchmarkReadyPathWithHeader is the path every opted-in request takes once
// the server is up; it must allocate nothing.
func BenchmarkReadyPathWithHeader(b *testing.B) {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil)
	r.Header.Set(ifready.HeaderIfReady, "")
	benchmarkFilter(b, initializedFilter(), r, http.StatusOK)
}

// BenchmarkReadyPathWithoutHeader is the path of every client that did not opt in.
func BenchmarkReadyPathWithoutHeader(b *testing.B) {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil)
	benchmarkFilter(b, initializedFilter(), r, http.StatusOK)
}

// BenchmarkNoFilter is the baseline the two above are compared with.
func BenchmarkNoFilter(b *testing.B) {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil)
	benchmarkFilter(b, okHandler, r, http.StatusOK)
}

// BenchmarkNotReadyPathRefused is an opted-in request while the server initializes.
func BenchmarkNotReadyPathRefused(b *testing.B) {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil)
	r.Header.Set(ifready.HeaderIfReady, "")
	h := WithRetryAfterUntilInitialized(okHandler, NewLatch(clock.RealClock{}), 5*time.Second)
	benchmarkFilter(b, h, r, http.StatusServiceUnavailable)
}

func TestReadyPathAllocatesNothing(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil)
	r.Header.Set(ifready.HeaderIfReady, "")
	h := initializedFilter()
	w := &reusedWriter{h: http.Header{}}
	allocs := testing.AllocsPerRun(1000, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	})
	if allocs != 0 {
		t.Errorf("ready path allocates %v times per request, want 0", allocs)
	}
}
