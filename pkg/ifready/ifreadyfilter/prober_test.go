package ifreadyfilter

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

func TestProbeUntilInitializedSetsLatchOnFirstFullReadyz(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || r.URL.RawQuery != "" {
			t.Errorf("prober asked %s, want the full /readyz", r.URL)
		}
		if calls.Add(1) < 3 {
			http.Error(w, "not ready", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()

	client := restClientFor(t, srv.URL)
	latch := NewLatch(clock.RealClock{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ProbeUntilInitialized(ctx, client, latch, 10*time.Millisecond)
	if !latch.IsSet() {
		t.Fatalf("latch not set after %d probes", calls.Load())
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("probed %d times, want 3 (stop at the first 200)", n)
	}
}

func TestProbeUntilInitializedStopsWithContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "never ready", http.StatusInternalServerError)
	}))
	defer srv.Close()
	client := restClientFor(t, srv.URL)
	latch := NewLatch(clock.RealClock{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	ProbeUntilInitialized(ctx, client, latch, 10*time.Millisecond)
	if latch.IsSet() {
		t.Error("latch set although /readyz never answered 200")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("prober returned %v after its context ended", d)
	}
}

func restClientFor(t *testing.T, host string) rest.Interface {
	t.Helper()
	client, err := rest.UnversionedRESTClientFor(&rest.Config{
		Host:          host,
		ContentConfig: rest.ContentConfig{NegotiatedSerializer: scheme.Codecs.WithoutConversion()},
	})
	if err != nil {
		t.Fatal(err)
	}
	return client
}
