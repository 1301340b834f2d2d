package ifreadyclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/steadyplane/steadyplane/pkg/ifready"
	"github.com/steadyplane/steadyplane/pkg/ifready/ifreadyfilter"
)

const namespaceList = `{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"default"}}]}`

// apiStub answers every request with a namespace list and counts the ones
// that carried the opt-in header.
type apiStub struct{ withHeader, total atomic.Int32 }

func (s *apiStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.total.Add(1)
	if _, ok := r.Header[ifready.HeaderIfReady]; ok {
		s.withHeader.Add(1)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(namespaceList))
}

func TestEnableSendsHeaderAndComposesWithExistingWrapper(t *testing.T) {
	stub := &apiStub{}
	srv := httptest.NewServer(stub)
	defer srv.Close()

	var innerCalls atomic.Int32
	cfg := &rest.Config{Host: srv.URL}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			innerCalls.Add(1)
			if _, ok := r.Header[ifready.HeaderIfReady]; !ok {
				t.Error("the existing wrapper saw a request without the header: ours must wrap outside it")
			}
			return rt.RoundTrip(r)
		})
	}
	obs := Enable(cfg)
	if obs.Last() != ifready.NoAnswer {
		t.Fatalf("Last before any request = %v", obs.Last())
	}
	cs := kubernetes.NewForConfigOrDie(rest.CopyConfig(cfg)) // copies keep the option
	if _, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if stub.withHeader.Load() != 1 || innerCalls.Load() != 1 {
		t.Errorf("server saw %d requests with the header, inner wrapper %d calls; want 1 and 1", stub.withHeader.Load(), innerCalls.Load())
	}
	// The stub does not implement KEP-3028: the observer must say so.
	if obs.Last() != ifready.NotUnderstood || obs.Count(ifready.NotUnderstood) != 1 {
		t.Errorf("Last = %v, Count(NotUnderstood) = %d", obs.Last(), obs.Count(ifready.NotUnderstood))
	}
}

func TestRoundTripperDoesNotModifyCallersRequest(t *testing.T) {
	stub := &apiStub{}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	rt := NewRoundTripper(http.DefaultTransport, nil)
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, ok := req.Header[ifready.HeaderIfReady]; ok {
		t.Error("caller's request was modified")
	}
	if stub.withHeader.Load() != 1 {
		t.Error("header not sent")
	}
}

// TestClientGoRetriesThroughInitialization drives a real client-go clientset
// through the real server filter: the server initializes after two refusals,
// and the caller sees one successful list, no error.
func TestClientGoRetriesThroughInitialization(t *testing.T) {
	latch := ifreadyfilter.NewLatch(clocktesting.NewFakeClock(time.Now()))
	stub := &apiStub{}
	var refusals atomic.Int32
	filtered := ifreadyfilter.WithRetryAfterUntilInitialized(stub, latch, time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !latch.IsSet() && refusals.Add(1) > 2 {
			latch.Set()
		}
		filtered.ServeHTTP(w, r)
	}))
	defer srv.Close()

	cfg := &rest.Config{Host: srv.URL}
	obs := Enable(cfg)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("caller saw an error: %v", err)
	}
	if len(list.Items) != 1 {
		t.Errorf("got %d namespaces", len(list.Items))
	}
	if got := obs.Count(ifready.Initializing); got != 2 {
		t.Errorf("server asked the client to wait %d times, want 2", got)
	}
	if obs.Last() != ifready.Ready {
		t.Errorf("Last = %v, want Ready", obs.Last())
	}
	if stub.total.Load() != 1 {
		t.Errorf("the API behind the filter was called %d times, want 1", stub.total.Load())
	}
}

// TestRetriesRunOutWithThe503Status: when the server never initializes the
// caller gets client-go's error, the 503 Status, after MaxRetries+1 attempts.
func TestRetriesRunOutWithThe503Status(t *testing.T) {
	latch := ifreadyfilter.NewLatch(clocktesting.NewFakeClock(time.Now()))
	var attempts atomic.Int32
	filtered := ifreadyfilter.WithRetryAfterUntilInitialized(&apiStub{}, latch, time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		filtered.ServeHTTP(w, r)
	}))
	defer srv.Close()

	cfg := &rest.Config{Host: srv.URL}
	Enable(cfg)
	client := kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := client.Get().AbsPath("/api/v1/namespaces").MaxRetries(2).Do(ctx).Error()
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("err = %v, want a ServiceUnavailable Status", err)
	}
	if d, ok := apierrors.SuggestsClientDelay(err); !ok || d != 1 {
		t.Errorf("error suggests delay %d, %v; want 1s", d, ok)
	}
	if n := attempts.Load(); n != 3 {
		t.Errorf("%d attempts, want 3 (MaxRetries 2 + 1)", n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
