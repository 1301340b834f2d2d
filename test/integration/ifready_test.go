// Package integration holds tests that run real steadyplane processes (etcd and
// kube-apiserver) on loopback addresses.
package integration

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/controlplane"
	"github.com/steadyplane/steadyplane/pkg/ifready"
	"github.com/steadyplane/steadyplane/pkg/ifready/ifreadyclient"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

const viewerName = "steadyplane-test-viewer"

// observed is one raw response seen while the server started.
type observed struct {
	code       int
	ready      []string // X-Kubernetes-Ready values; nil when absent
	retryAfter string
	reason     metav1.StatusReason
}

func (o observed) String() string {
	return fmt.Sprintf("%d ready=%v retry-after=%q reason=%q", o.code, o.ready, o.retryAfter, o.reason)
}

// logWriter sends progress lines of the control plane to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startControlPlane starts etcd and the API server for a test in a
// temporary directory, skipping in -short mode; they stop when the test ends.
func startControlPlane(t *testing.T) (context.Context, *controlplane.ControlPlane, controlplane.Options, string) {
	t.Helper()
	return startControlPlaneWith(t, nil)
}

// startControlPlaneWith is startControlPlane with the options changed by
// modify (nil for none) first.
func startControlPlaneWith(t *testing.T, modify func(*controlplane.Options)) (context.Context, *controlplane.ControlPlane, controlplane.Options, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	o, err := testenv.ControlPlaneOptions(dir, logWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if modify != nil {
		modify(&o)
	}
	cp, err := testenv.StartControlPlane(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		testenv.CleanNode(filepath.Join(dir, "node"))
		_ = exec.Command("ip", "link", "del", o.CNIBridge).Run()
	})
	t.Cleanup(cp.Close)
	t.Cleanup(cp.Stop)
	return ctx, cp, o, dir
}

func TestRetryDuringServerInitialization(t *testing.T) {
	ctx, cp, _, _ := startControlPlane(t)

	// A user whose rights come from RBAC alone, unlike the admin's
	// system:masters: during initialization the RBAC authorizer may not have
	// loaded its bindings yet, which is the inconsistency KEP-3028 is about.
	viewer := makeViewer(ctx, t, cp)

	t.Run("with the option, initialization is refused with the 503 triple, then served", func(t *testing.T) {
		restartAPIServer(ctx, t, cp, nil)
		rec := startRecording(ctx, cp, viewer)

		// client-go with the option, started after the port opens and before
		// /readyz is OK: client-go's retry must carry it through.
		withOption := rest.CopyConfig(viewer)
		obs := ifreadyclient.Enable(withOption)
		withOptionErr := make(chan error, 1)
		go func() {
			_, err := kubernetes.NewForConfigOrDie(withOption).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			withOptionErr <- err
		}()
		// The same client without the option: what it sees is recorded, not asserted.
		withoutOptionErr := make(chan error, 1)
		go func() {
			_, err := kubernetes.NewForConfigOrDie(rest.CopyConfig(viewer)).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			withoutOptionErr <- err
		}()

		if err := <-withOptionErr; err != nil {
			t.Errorf("client with the option saw an error: %v", err)
		}
		if n := obs.Count(ifready.Initializing); n == 0 {
			t.Errorf("client with the option was never asked to wait: it did not start before the server was ready, so this run proved nothing")
		} else {
			t.Logf("client with the option: asked to wait %d times, then served (last answer %v)", n, obs.Last())
		}
		if obs.Last() != ifready.Ready {
			t.Errorf("last answer %v, want Ready", obs.Last())
		}
		t.Logf("client without the option: first list returned error %v", <-withoutOptionErr)

		withHeader, withoutHeader, exempt := rec.wait(t)
		t.Logf("requests without the header during startup: %s", summarize(withoutHeader))
		refusals := 0
		for i, r := range withHeader {
			last := i == len(withHeader)-1
			switch {
			case last:
				if r.code != http.StatusOK || !equalValues(r.ready, "true") {
					t.Errorf("after initialization: %v, want 200 with X-Kubernetes-Ready: true", r)
				}
			case r.code == http.StatusServiceUnavailable && equalValues(r.ready, "false") && r.retryAfter == "1" && r.reason == metav1.StatusReasonServiceUnavailable:
				refusals++
			default:
				t.Errorf("response %d with the header before initialization: %v, want 503 Retry-After: 1 X-Kubernetes-Ready: false ServiceUnavailable", i, r)
			}
		}
		if refusals == 0 {
			t.Errorf("no refusal seen; responses with the header: %v", withHeader)
		}
		t.Logf("requests with the header: %d refused with the 503 triple, then served", refusals)
		for _, r := range exempt {
			if r.retryAfter != "" {
				t.Errorf("/livez with the header was refused: %v", r)
			}
		}

		// Nobody but the server itself asked /readyz: its own probe flipped the latch.
		metrics := get(ctx, t, cp, "/metrics")
		if !strings.Contains(metrics, "steadyplane_apiserver_initialized 1") {
			t.Error("steadyplane_apiserver_initialized is not 1")
		}
		if !strings.Contains(metrics, "steadyplane_ifready_rejected_requests_total ") || strings.Contains(metrics, "steadyplane_ifready_rejected_requests_total 0\n") {
			t.Error("steadyplane_ifready_rejected_requests_total did not count the refusals")
		}
	})

	t.Run("with the option off, the server never sets X-Kubernetes-Ready", func(t *testing.T) {
		restartAPIServer(ctx, t, cp, []string{"--startup-send-retry-after-if-not-initialized=false"})
		rec := startRecording(ctx, cp, viewer)
		withHeader, _, _ := rec.wait(t)
		for _, r := range withHeader {
			if r.ready != nil || r.retryAfter != "" {
				t.Errorf("option off, yet %v", r)
			}
		}
		// And after readiness too.
		client, _ := rest.HTTPClientFor(viewer)
		r := do(ctx, client, cp.APIServerURL()+"/api/v1/namespaces", true)
		if r.ready != nil {
			t.Errorf("option off, after readiness: %v", r)
		}
		if strings.Contains(get(ctx, t, cp, "/metrics"), "steadyplane_apiserver_initialized") {
			t.Error("option off, yet the filter's metrics are registered")
		}
		t.Logf("option off: %d responses with the header, none marked", len(withHeader))
	})
}

func makeViewer(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) *rest.Config {
	t.Helper()
	admin, err := cp.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	rbac := kubernetes.NewForConfigOrDie(admin).RbacV1()
	_, err = rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: viewerName},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: viewerName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: viewerName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: viewerName}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	store := &pki.Store{Dir: filepath.Join(cp.DataDir(), "pki")}
	kp, err := store.EnsureCert(cp.PKI().CA, pki.CertSpec{Name: "test-viewer", CommonName: viewerName, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	viewer := rest.AnonymousClientConfig(admin)
	viewer.CertData, viewer.KeyData = kp.CertPEM, kp.KeyPEM
	// Wait until the viewer can list: the bindings are in effect.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := kubernetes.NewForConfigOrDie(viewer).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err == nil {
			return viewer
		}
		if time.Now().After(deadline) {
			t.Fatalf("viewer cannot list namespaces: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restartAPIServer stops the API server, starts it again with extra
// arguments, and returns once its port accepts connections, before readiness.
func restartAPIServer(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, extra []string) {
	t.Helper()
	if !cp.APIServer.Stop(20 * time.Second) {
		t.Log("apiserver had to be killed")
	}
	base := cp.APIServer.Args
	cp.APIServer.Args = append(append([]string{}, base...), extra...)
	defer func() { cp.APIServer.Args = base }()
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(cp.APIServerURL(), "https://")
	if err := testenv.WaitListening(ctx, host, cp.APIServer.Exited()); err != nil {
		t.Fatalf("%v\n%s", err, cp.APIServer.LogTail(20))
	}
}

// recording polls the API server from the moment its port opens until it is
// ready: with the header, without it, and on an exempt path with it.
type recording struct {
	wg                               sync.WaitGroup
	withHeader, withoutHeader, livez []observed
	err                              error
}

func startRecording(ctx context.Context, cp *controlplane.ControlPlane, viewer *rest.Config) *recording {
	rec := &recording{}
	client, err := rest.HTTPClientFor(viewer)
	if err != nil {
		rec.err = err
		return rec
	}
	base := cp.APIServerURL()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	rec.wg.Add(1)
	go func() {
		defer rec.wg.Done()
		defer cancel()
		// Bounded in count and time; ends at the first response served with
		// the server initialized (or, with the option off, at the first 200).
		for i := 0; i < 20000 && ctx.Err() == nil; i++ {
			r := do(ctx, client, base+"/api/v1/namespaces", true)
			if r.code != 0 {
				rec.withHeader = append(rec.withHeader, r)
			}
			if w := do(ctx, client, base+"/api/v1/namespaces", false); w.code != 0 {
				rec.withoutHeader = append(rec.withoutHeader, w)
			}
			if l := do(ctx, client, base+"/livez", true); l.code != 0 {
				rec.livez = append(rec.livez, l)
			}
			if r.code == http.StatusOK {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		rec.err = fmt.Errorf("server not serving after %d requests", len(rec.withHeader))
	}()
	return rec
}

func (rec *recording) wait(t *testing.T) (withHeader, withoutHeader, livez []observed) {
	t.Helper()
	rec.wg.Wait()
	if rec.err != nil {
		t.Fatal(rec.err)
	}
	return rec.withHeader, rec.withoutHeader, rec.livez
}

func do(ctx context.Context, client *http.Client, url string, withHeader bool) observed {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if withHeader {
		req.Header[ifready.HeaderIfReady] = []string{""}
	}
	resp, err := client.Do(req)
	if err != nil {
		return observed{}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	o := observed{code: resp.StatusCode, ready: resp.Header.Values(ifready.HeaderReady), retryAfter: resp.Header.Get("Retry-After")}
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		o.reason = st.Reason
	}
	return o
}

func get(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, path string) string {
	t.Helper()
	admin, err := cp.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	b, err := kubernetes.NewForConfigOrDie(admin).Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return string(b)
}

func summarize(rs []observed) string {
	counts := map[int]int{}
	for _, r := range rs {
		counts[r.code]++
	}
	parts := []string{}
	for code, n := range counts {
		parts = append(parts, strconv.Itoa(n)+"×"+strconv.Itoa(code))
	}
	return strings.Join(parts, ", ")
}

func equalValues(vs []string, want string) bool { return len(vs) == 1 && vs[0] == want }
