package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/altsvc"
	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
)

// TestAlternativeServicesFailover runs three API servers, each on its own
// test host, over a three-member etcd cluster. A client-go client given only
// the first learns the others from Alt-Svc, and keeps working while the one it
// uses is killed with SIGKILL under load: no idempotent request fails, and no
// write is applied twice.
func TestAlternativeServicesFailover(t *testing.T) {
	ctx, c := startHACluster(t, 3, 8*time.Minute)

	admin, err := kubernetes.NewForConfig(c.AdminConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`h2="%s"; ma=3600, h2="%s"; ma=3600, h2="%s"; ma=3600`, c.Host(0), c.Host(1), c.Host(2))
	waitFor(ctx, t, 90*time.Second, "every server to advertise all three", func() (bool, string) {
		for i := range c.APIServers {
			if got := altSvcHeader(t, c, i, "/api", true, true); got != want {
				return false, fmt.Sprintf("node%d sends %q", i, got)
			}
		}
		return true, ""
	})

	t.Run("the header only for authenticated HTTP/2 API requests", func(t *testing.T) {
		for _, tc := range []struct {
			name          string
			path          string
			h2, withCreds bool
		}{
			{"HTTP/1.1", "/api", false, true},
			// /version, not /api: anonymous callers may read it, so the filter
			// is reached and must decide by itself.
			{"anonymous", "/version", true, false},
			{"readyz", "/readyz", true, true},
			{"metrics", "/metrics", true, true},
		} {
			if got := altSvcHeader(t, c, 0, tc.path, tc.h2, tc.withCreds); got != "" {
				t.Errorf("%s: Alt-Svc %q, want none", tc.name, got)
			}
		}
		raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), "steadyplane_apiserver_alternative_services 3") {
			t.Errorf("/metrics does not report 3 advertised servers")
		}
	})

	t.Run("a pod's Alt-Svc through the proxy subresource moves no client", func(t *testing.T) {
		checkProxyInjection(ctx, t, c, want)
	})

	cfg := c.AdminConfig(0)
	cfg.QPS, cfg.Burst = 200, 400 // client-go's 5 QPS would throttle the load below
	pool, err := altsvcclient.Enable(cfg, altsvcclient.Options{BlockDuration: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(pool.Hosts()); n != 3 || pool.Current() != c.Host(0) {
		t.Fatalf("after one request the client knows %d hosts and uses %q; want 3 and %s", n, pool.Current(), c.Host(0))
	}

	// An informer, as controllers use: after the kill no event may be lost
	// and no object already seen may be ADDED again.
	informerCtx, stopInformer := context.WithCancel(ctx)
	defer stopInformer()
	var addedMu sync.Mutex
	added := map[string]int{}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "writer=altsvc-test" }))
	cmInformer := factory.Core().V1().ConfigMaps().Informer()
	if _, err := cmInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			addedMu.Lock()
			added[cm.Name]++
			addedMu.Unlock()
		}
	}}); err != nil {
		t.Fatal(err)
	}
	factory.Start(informerCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), cmInformer.HasSynced) {
		t.Fatal("informer never synced")
	}

	// Load: two readers, a watcher that re-opens its watch, and a writer.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var reads, readErrs, watchEvents, eventsAfterKill atomic.Int64
	var killed atomic.Bool
	var firstReadErr atomic.Value
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000 && loadCtx.Err() == nil; i++ {
				_, err := cs.CoreV1().ConfigMaps("default").List(loadCtx, metav1.ListOptions{Limit: 5})
				if loadCtx.Err() != nil {
					return
				}
				reads.Add(1)
				if err != nil {
					readErrs.Add(1)
					firstReadErr.CompareAndSwap(nil, err.Error())
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 1000 && loadCtx.Err() == nil; i++ {
			w, err := cs.CoreV1().ConfigMaps("default").Watch(loadCtx, metav1.ListOptions{LabelSelector: "writer=altsvc-test"})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Added {
					watchEvents.Add(1)
					if killed.Load() {
						eventsAfterKill.Add(1)
					}
				}
			}
			w.Stop()
		}
	}()
	writes := map[int]int{} // sequence number -> attempts that reported success
	var writesMu sync.Mutex
	var writeErrs atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := 0; seq < 10000 && loadCtx.Err() == nil; seq++ {
			// generateName makes a duplicated POST visible as a second object.
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "w-", Labels: map[string]string{"writer": "altsvc-test", "seq": strconv.Itoa(seq)}}}
			for attempt := 0; attempt < 20 && loadCtx.Err() == nil; attempt++ {
				_, err := cs.CoreV1().ConfigMaps("default").Create(loadCtx, cm, metav1.CreateOptions{})
				if err == nil {
					writesMu.Lock()
					writes[seq]++
					writesMu.Unlock()
					break
				}
				writeErrs.Add(1)
				// The outcome is unknown: look before writing again, as a
				// careful caller does.
				l, lerr := cs.CoreV1().ConfigMaps("default").List(loadCtx, metav1.ListOptions{LabelSelector: "seq=" + strconv.Itoa(seq)})
				if lerr == nil && len(l.Items) > 0 {
					writesMu.Lock()
					writes[seq]++
					writesMu.Unlock()
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	time.Sleep(3 * time.Second)
	before := reads.Load()
	t.Logf("killing node0's API server (in use: %s) after %d reads", pool.Current(), before)
	killed.Store(true)
	c.KillAPIServer(0)
	time.Sleep(6 * time.Second)
	stopLoad()
	wg.Wait()

	t.Logf("reads %d (%d after the kill), read errors %d, watch events %d (%d after the kill), writes %d, write errors %d, now on %s",
		reads.Load(), reads.Load()-before, readErrs.Load(), watchEvents.Load(), eventsAfterKill.Load(), len(writes), writeErrs.Load(), pool.Current())
	if n := readErrs.Load(); n != 0 {
		t.Errorf("%d idempotent reads failed; first: %v", n, firstReadErr.Load())
	}
	if reads.Load()-before < 20 {
		t.Errorf("only %d reads after the kill: the client stalled", reads.Load()-before)
	}
	if eventsAfterKill.Load() == 0 {
		t.Error("the watch saw no event after the kill")
	}
	if cur := pool.Current(); cur == c.Host(0) || cur == "" {
		t.Errorf("client still on %q after node0 died", cur)
	}
	// Every write exactly once: one object per sequence number.
	all, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: "writer=altsvc-test"})
	if err != nil {
		t.Fatal(err)
	}
	perSeq := map[string]int{}
	for _, cm := range all.Items {
		perSeq[cm.Labels["seq"]]++
	}
	for seq, n := range perSeq {
		if n != 1 {
			t.Errorf("write %s applied %d times", seq, n)
		}
	}
	if len(perSeq) < len(writes) || len(writes) < 50 {
		t.Errorf("%d objects for %d acknowledged writes", len(perSeq), len(writes))
	}
	waitFor(ctx, t, 30*time.Second, "the informer to hold every object", func() (bool, string) {
		n := len(cmInformer.GetStore().List())
		return n == len(all.Items), fmt.Sprintf("%d of %d", n, len(all.Items))
	})
	addedMu.Lock()
	for _, cm := range all.Items {
		if n := added[cm.Name]; n != 1 {
			t.Errorf("informer: %s ADDED %d times", cm.Name, n)
		}
	}
	addedMu.Unlock()
	stopInformer()

	t.Run("steadyplane kubectl survives the loss of the kubeconfig's server", func(t *testing.T) {
		if err := c.RestartAPIServer(ctx, 0); err != nil {
			t.Fatal(err)
		}
		checkKubectlSurvivesKill(ctx, t, c)
	})

	t.Run("a server other than the original rejoins once restarted, and serves when the others die", func(t *testing.T) {
		x := c.Index(pool.Current())
		if x <= 0 {
			t.Fatalf("the client is on %q, want node1 or node2", pool.Current())
		}
		if err := c.RestartAPIServer(ctx, 0); err != nil {
			t.Fatal(err)
		}
		c.KillAPIServer(x)
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("GET after node%d died: %v", x, err)
		}
		if err := c.RestartAPIServer(ctx, x); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second) // past the 3s block
		for i := range c.APIServers {
			if i != x {
				c.KillAPIServer(i)
			}
		}
		for i := 0; i < 10; i++ {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
				t.Fatalf("GET %d with only node%d alive: %v", i, x, err)
			}
		}
		if pool.Current() != c.Host(x) {
			t.Errorf("serving host %q, want %s", pool.Current(), c.Host(x))
		}
	})
}

// startHACluster starts n API servers on test hosts for t, which it skips in
// -short mode (and outside CI without root); it stops them when t ends,
// with their logs if t failed.
func startHACluster(t *testing.T, n int, timeout time.Duration) (context.Context, *testenv.HACluster) {
	t.Helper()
	if testing.Short() {
		testci.CannotRun(t, "-short: starts %d etcd members and %d API servers", n, n)
	}
	testenv.RequireNetwork(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	start := time.Now()
	c, err := testenv.StartHACluster(ctx, t.TempDir(), n, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTails(15))
		}
		c.Close()
	})
	t.Logf("%d API servers ready in %v", n, time.Since(start).Round(time.Millisecond))
	return ctx, c
}

// altSvcHeader sends one GET to host i and returns its Alt-Svc header, every
// value of it joined: a second value (a backend's, appended) must show.
func altSvcHeader(t *testing.T, c *testenv.HACluster, i int, path string, h2, withCreds bool) string {
	t.Helper()
	cfg := c.AdminConfig(i)
	if !withCreds {
		cfg = rest.AnonymousClientConfig(cfg)
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(c.URL(i) + path)
	if err != nil {
		t.Fatalf("GET %s%s: %v", c.URL(i), path, err)
	}
	resp.Body.Close()
	if (resp.ProtoMajor == 2) != h2 {
		t.Fatalf("GET %s spoke %s", path, resp.Proto)
	}
	return strings.Join(resp.Header.Values(altsvc.HeaderName), ", ")
}

// waitFor polls cond every 250ms until it holds or timeout passes.
func waitFor(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for ctx.Err() == nil && time.Now().Before(deadline) {
		ok, status := cond()
		if ok {
			return
		}
		last = status
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, last)
}
