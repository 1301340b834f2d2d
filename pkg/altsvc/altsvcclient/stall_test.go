package altsvcclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/steadyplane/steadyplane/internal/testnet"
	"github.com/steadyplane/steadyplane/internal/testpki"
)

func TestAtMostOnce(t *testing.T) {
	const jsonType = "application/json"
	for _, tc := range []struct {
		name, method, contentType, body string
		want                            bool
	}{
		{"an update naming its resourceVersion", "PUT", jsonType, `{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"42"}}`, true},
		{"the content type may carry parameters", "PUT", "application/json; charset=utf-8", `{"metadata":{"resourceVersion":"42"}}`, true},
		{"an update without one is unconditional", "PUT", jsonType, `{"metadata":{"name":"a"}}`, false},
		{"resourceVersion 0 asks for an unconditional update", "PUT", jsonType, `{"metadata":{"resourceVersion":"0"}}`, false},
		{"so does 00, read as a number", "PUT", jsonType, `{"metadata":{"resourceVersion":"00"}}`, false},
		{"a resourceVersion that is no number", "PUT", jsonType, `{"metadata":{"resourceVersion":"x1"}}`, false},
		{"field names are case-sensitive, as the API server reads them", "PUT", jsonType, `{"metadata":{"ResourceVersion":"42"}}`, false},
		{"in a delete's options too", "DELETE", jsonType, `{"Preconditions":{"resourceVersion":"7"}}`, false},
		{"an empty resourceVersion is none", "PUT", jsonType, `{"metadata":{"resourceVersion":""}}`, false},
		{"a delete with a resourceVersion precondition", "DELETE", jsonType, `{"kind":"DeleteOptions","preconditions":{"resourceVersion":"7"}}`, true},
		{"a delete with a uid precondition", "DELETE", jsonType, `{"preconditions":{"uid":"0d5b-11"}}`, true},
		{"a delete without preconditions", "DELETE", jsonType, `{"propagationPolicy":"Background"}`, false},
		{"a delete with empty preconditions", "DELETE", jsonType, `{"preconditions":{}}`, false},
		{"a delete's resourceVersion in metadata is no precondition", "DELETE", jsonType, `{"metadata":{"resourceVersion":"7"}}`, false},
		{"a create is never", "POST", jsonType, `{"metadata":{"name":"a","resourceVersion":"7"}}`, false},
		{"a patch is never", "PATCH", "application/merge-patch+json", `{"metadata":{"resourceVersion":"7"}}`, false},
		{"an empty protobuf body", "PUT", "application/vnd.kubernetes.protobuf", "k8s\x00", false},
		{"CBOR is not read", "PUT", "application/cbor", `{"metadata":{"resourceVersion":"42"}}`, false},
		{"a malformed body", "PUT", jsonType, `{"metadata":{"resourceVersion":`, false},
		{"a resourceVersion of the wrong type", "PUT", jsonType, `{"metadata":{"resourceVersion":42}}`, false},
		{"no content type", "PUT", "", `{"metadata":{"resourceVersion":"42"}}`, false},
	} {
		if got := AtMostOnce(tc.method, "/api/v1/namespaces/d/configmaps/a", tc.contentType, []byte(tc.body)); got != tc.want {
			t.Errorf("%s: AtMostOnce(%s, %q, %s) = %v, want %v", tc.name, tc.method, tc.contentType, tc.body, got, tc.want)
		}
	}
}

// protobufBody is obj as client-go sends it by default: Kubernetes'
// protobuf, at v1.
func protobufBody(t testing.TB, obj runtime.Object) string {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	b, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion), obj)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAtMostOnceProtobuf(t *testing.T) {
	const pb = runtime.ContentTypeProtobuf
	cm := func(rv string) runtime.Object {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "d", ResourceVersion: rv, Labels: map[string]string{"k": "v"}}, Data: map[string]string{"v": "1"}}
	}
	del := func(p *metav1.Preconditions) runtime.Object {
		return &metav1.DeleteOptions{Preconditions: p, PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	}
	for _, tc := range []struct {
		name, method, body string
		want               bool
	}{
		{"an update naming its resourceVersion", "PUT", protobufBody(t, cm("42")), true},
		{"an update without one", "PUT", protobufBody(t, cm("")), false},
		{"resourceVersion 0", "PUT", protobufBody(t, cm("0")), false},
		{"resourceVersion 00", "PUT", protobufBody(t, cm("00")), false},
		{"a delete with a resourceVersion precondition", "DELETE", protobufBody(t, del(&metav1.Preconditions{ResourceVersion: ptr.To("7")})), true},
		{"a delete with a uid precondition", "DELETE", protobufBody(t, del(&metav1.Preconditions{UID: ptr.To(types.UID("0d5b"))})), true},
		{"a delete without preconditions", "DELETE", protobufBody(t, del(nil)), false},
		{"a create", "POST", protobufBody(t, cm("42")), false},
		{"no magic", "PUT", protobufBody(t, cm("42"))[4:], false},
		{"cut short", "PUT", protobufBody(t, cm("42"))[:20], false},
	} {
		if got := AtMostOnce(tc.method, "/api/v1/namespaces/d/configmaps/a", pb, []byte(tc.body)); got != tc.want {
			t.Errorf("%s: AtMostOnce(%s, protobuf) = %v, want %v", tc.name, tc.method, got, tc.want)
		}
	}
}

func FuzzAtMostOnce(f *testing.F) {
	f.Add("PUT", `{"metadata":{"resourceVersion":"42"}}`)
	f.Add("DELETE", `{"preconditions":{"uid":"x"}}`)
	f.Add("POST", `{}`)
	f.Add("PUT", protobufBody(f, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "42"}}))
	f.Fuzz(func(t *testing.T, method, body string) {
		for _, ct := range []string{"application/json", runtime.ContentTypeProtobuf} {
			if AtMostOnce(method, "/api/v1/namespaces/d/configmaps/a", ct, []byte(body)) && method != http.MethodPut && method != http.MethodDelete {
				t.Errorf("AtMostOnce(%q, %s, %q): only an update or a delete can be", method, ct, body)
			}
		}
	})
}

func TestAtMostOnceNeverThroughAProxy(t *testing.T) {
	body := []byte(`{"metadata":{"resourceVersion":"42"}}`)
	if !AtMostOnce("PUT", "/api/v1/namespaces/d/configmaps/a", "application/json", body) {
		t.Fatal("a conditional update of a ConfigMap is not at most once")
	}
	// A backend behind a proxy keeps no precondition.
	for _, path := range []string{"/api/v1/namespaces/d/services/s/proxy/items/a", "/api/v1/namespaces/d/pods/p:8080/proxy/"} {
		if AtMostOnce("PUT", path, "application/json", body) {
			t.Errorf("a PUT to %s is taken as at most once", path)
		}
	}
}

func TestSettlesUnknown(t *testing.T) {
	for status, want := range map[int]bool{
		200: true, 201: true, 202: true, // this copy took effect (or a delete's object is going)
		413: true, 415: true, // the request's bytes are refused, the first copy's too
		400: false, 403: false, 422: false, // admission saw the object as the first copy may have left it
		404: false, 409: false, // maybe the first copy's doing
		429: false, 500: false, 503: false, 504: false, // nothing settled
		401: false, 302: false,
	} {
		if got := SettlesUnknown(status); got != want {
			t.Errorf("SettlesUnknown(%d) = %v, want %v", status, got, want)
		}
	}
}

// frozenPair starts a, behind a Freezer, and b, and a client that knows
// both and has reached a through the freezer once.
func frozenPair(t *testing.T, p *testpki.TestPKI, o Options) (a, b *apiServer, f *testnet.Freezer, hc *http.Client, pool *Pool) {
	t.Helper()
	a = startServer(t, p, p.CA, "a", "127.0.0.1", false)
	b = startServer(t, p, p.CA, "b", "127.0.0.2", true)
	f = testnet.Freeze(t, "127.0.0.1", a.host())
	o.Hosts = []string{f.Addr(), b.host()}
	hc, pool = client(t, p, f.Addr(), o)
	if got, err := get(hc, "https://"+f.Addr()+"/api"); err != nil || !strings.HasPrefix(got, "a ") {
		t.Fatalf("first GET: %q, %v; want a's answer", got, err)
	}
	return a, b, f, hc, pool
}

func put(hc *http.Client, url, body string) (*http.Response, string, error) {
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func TestStalledServer(t *testing.T) {
	p := testpki.New(t)
	fast := Options{StallCheckAfter: 100 * time.Millisecond, StallCheckTimeout: 200 * time.Millisecond}

	t.Run("a write in flight on a server that stopped answering ends soon, outcome unknown, and is not resent", func(t *testing.T) {
		_, b, f, hc, pool := frozenPair(t, p, fast)
		f.Freeze()
		start := time.Now()
		_, err := post(hc, "https://"+f.Addr()+"/api", "once")
		took := time.Since(start)
		var unanswered *UnansweredError
		if err == nil || !IsOutcomeUnknown(err) || !errors.As(err, &unanswered) {
			t.Fatalf("POST to a frozen server: %v; want an outcome-unknown error, the server having stopped answering", err)
		}
		if took > 2*time.Second {
			t.Errorf("the POST took %v to end; the check should end it within about 300ms", took)
		}
		if n := b.requests.Load(); n != 0 {
			t.Errorf("the POST was resent to b (%d requests)", n)
		}
		// The next write goes to b at once.
		start = time.Now()
		if got, err := post(hc, "https://"+f.Addr()+"/api", "next"); err != nil || !strings.HasPrefix(got, "b ") || time.Since(start) > 250*time.Millisecond {
			t.Errorf("next POST: %q, %v after %v; want b's answer at once", got, err, time.Since(start))
		}
		if pool.Current() != b.host() {
			t.Errorf("current host %q, want %s", pool.Current(), b.host())
		}
		f.Thaw()
	})

	t.Run("a conditional update is sent again and established on the next server", func(t *testing.T) {
		_, b, f, hc, _ := frozenPair(t, p, fast)
		settled := testutil.ToFloat64(metrics.unknowns.WithLabelValues("settled"))
		f.Freeze()
		defer f.Thaw()
		resp, got, err := put(hc, "https://"+f.Addr()+"/api/v1/namespaces/d/configmaps/x", `{"metadata":{"name":"x","resourceVersion":"5"}}`)
		if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(got, "b ") {
			t.Fatalf("conditional PUT to a frozen server: %v, %q, %v; want b's answer", resp, got, err)
		}
		if n := b.requests.Load(); n != 1 {
			t.Errorf("b got %d requests, want the one PUT", n)
		}
		if d := testutil.ToFloat64(metrics.unknowns.WithLabelValues("settled")) - settled; d != 1 {
			t.Errorf("settled writes counted %v times, want 1", d)
		}
	})

	t.Run("a conditional update that conflicts when sent again has an unknown outcome", func(t *testing.T) {
		_, b, f, hc, _ := frozenPair(t, p, fast)
		b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.requests.Add(1)
			http.Error(w, `{"kind":"Status","reason":"Conflict"}`, http.StatusConflict)
		})
		f.Freeze()
		defer f.Thaw()
		_, _, err := put(hc, "https://"+f.Addr()+"/api/v1/namespaces/d/configmaps/x", `{"metadata":{"resourceVersion":"5"}}`)
		if !IsOutcomeUnknown(err) || !strings.Contains(err.Error(), "409") {
			t.Fatalf("PUT whose second copy met a conflict: %v; want an outcome-unknown error that tells of the 409 (the first copy may have made it)", err)
		}
	})

	t.Run("an unconditional update is not sent again", func(t *testing.T) {
		_, b, f, hc, _ := frozenPair(t, p, fast)
		f.Freeze()
		defer f.Thaw()
		if _, _, err := put(hc, "https://"+f.Addr()+"/api/v1/namespaces/d/configmaps/x", `{"metadata":{"name":"x"}}`); !IsOutcomeUnknown(err) {
			t.Fatalf("unconditional PUT to a frozen server: %v; want an outcome-unknown error", err)
		}
		if n := b.requests.Load(); n != 0 {
			t.Errorf("the unconditional PUT reached b (%d requests)", n)
		}
	})

	t.Run("a write on a server whose storage stalls ends soon too", func(t *testing.T) {
		// The server is there (its connection and TLS work) but holds
		// every request, as an API server whose etcd is paused does.
		a, b, f, hc, _ := frozenPair(t, p, fast)
		var reads atomic.Int32
		a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				reads.Add(1)
			}
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		})
		start := time.Now()
		_, err := post(hc, "https://"+f.Addr()+"/api/v1/namespaces/d/configmaps", `{"metadata":{"name":"x"}}`)
		if !IsOutcomeUnknown(err) || time.Since(start) > 2*time.Second {
			t.Fatalf("POST to a server whose storage stalls: %v after %v; want an outcome-unknown error within about 300ms", err, time.Since(start))
		}
		if reads.Load() == 0 {
			t.Error("no read checked the server's storage")
		}
		if n := b.requests.Load(); n != 0 {
			t.Errorf("the POST was resent to b (%d requests)", n)
		}
	})

	t.Run("a server that refuses the check's read is there", func(t *testing.T) {
		a, b, f, hc, _ := frozenPair(t, p, fast)
		a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
			time.Sleep(600 * time.Millisecond)
			fmt.Fprint(w, "a slow")
		})
		if got, err := post(hc, "https://"+f.Addr()+"/api", "slow"); err != nil || got != "a slow" {
			t.Fatalf("slow POST: %q, %v; want a's answer", got, err)
		}
		if n := b.requests.Load(); n != 0 {
			t.Errorf("the slow POST reached b (%d requests)", n)
		}
	})

	t.Run("on the last server a stalled write waits, as it would without the option", func(t *testing.T) {
		a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
		f := testnet.Freeze(t, "127.0.0.1", a.host())
		o := fast
		o.Hosts = []string{f.Addr()}
		hc, _ := client(t, p, f.Addr(), o)
		if got, err := get(hc, "https://"+f.Addr()+"/api"); err != nil || !strings.HasPrefix(got, "a ") {
			t.Fatalf("first GET: %q, %v", got, err)
		}
		f.Freeze()
		time.AfterFunc(time.Second, f.Thaw) // several checks' worth
		got, err := post(hc, "https://"+f.Addr()+"/api", "waits")
		if err != nil || !strings.HasPrefix(got, "a ") {
			t.Fatalf("POST to the only server, frozen for a second: %q, %v; want a's answer once it thawed", got, err)
		}
	})

	t.Run("a slow write on a server that still answers is waited for", func(t *testing.T) {
		a, b, f, hc, _ := frozenPair(t, p, fast)
		a.onPost = func(s *apiServer, w http.ResponseWriter) bool {
			time.Sleep(time.Second) // several checks pass meanwhile
			fmt.Fprint(w, "a slow")
			return true
		}
		got, err := post(hc, "https://"+f.Addr()+"/api", "slow")
		if err != nil || got != "a slow" {
			t.Fatalf("slow POST: %q, %v; want a's answer", got, err)
		}
		if n := b.requests.Load(); n != 0 {
			t.Errorf("the slow POST reached b (%d requests)", n)
		}
	})
}

func TestLivenessChecksAHostOnceForAllWaiting(t *testing.T) {
	l := newLiveness(time.Hour, time.Second)
	var probes atomic.Int32
	release := make(chan struct{})
	probe := func(ctx context.Context) error {
		probes.Add(1)
		<-release
		return errors.New("gone")
	}
	errs := make(chan error, 5)
	for range 5 {
		go func() { errs <- l.check(context.Background(), "h:1", probe) }()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	for range 5 {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("a waiting request was told the host answered")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a check never ended")
		}
	}
	// A fresh result is kept: no second probe.
	if err := l.check(context.Background(), "h:1", probe); err == nil {
		t.Error("the kept result was lost")
	}
	if n := probes.Load(); n != 1 {
		t.Errorf("%d probes of one host, want 1", n)
	}
	// A request that ends does not wait for the check.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	block := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	if err := l.check(ctx, "other:1", block); err != nil {
		t.Errorf("check for an ended request: %v, want nil", err)
	}
}

// BenchmarkWrite is the cost of the stall check on a write that is
// answered at once (a timer armed and stopped, a context): POSTs to a
// local TLS HTTP/2 server through plain client-go, the option with the
// check, and the option without it.
func BenchmarkWrite(b *testing.B) {
	p := testpki.New(b)
	srv := startServer(b, p, p.CA, "a", "127.0.0.1", false)
	srv.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "a")
	})
	plainCfg := &rest.Config{Host: "https://" + srv.host(), TLSClientConfig: rest.TLSClientConfig{CAData: p.CA.CertPEM}}
	plain, err := rest.HTTPClientFor(plainCfg)
	if err != nil {
		b.Fatal(err)
	}
	// With a second server to go to: on the last one of a plan a write is
	// not checked.
	alt := startServer(b, p, p.CA, "b", "127.0.0.2", true)
	checked, _ := client(b, p, srv.host(), Options{Hosts: []string{srv.host(), alt.host()}})
	unchecked, _ := client(b, p, srv.host(), Options{Hosts: []string{srv.host(), alt.host()}, StallCheckAfter: -1})
	for _, bc := range []struct {
		name string
		c    *http.Client
	}{{"client-go", plain}, {"stall-check", checked}, {"no-stall-check", unchecked}} {
		b.Run(bc.name, func(b *testing.B) {
			url := "https://" + srv.host() + "/api/v1/namespaces/d/configmaps"
			b.ReportAllocs()
			for b.Loop() {
				if _, err := post(bc.c, url, `{"metadata":{"name":"x"}}`); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
