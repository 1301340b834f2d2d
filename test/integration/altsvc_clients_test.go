package integration

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
)

// checkProxyInjection runs a "pod" (an HTTP server of the test, on the
// hosts' bridge) that answers every request with an Alt-Svc header naming
// an address of the test's own, reaches it through the pods/proxy
// subresource, and checks that the answer carries the servers' own list
// (want, "" for none) and that a client using the proxy learns nothing.
func checkProxyInjection(ctx context.Context, t *testing.T, c *testenv.HACluster, want string) {
	t.Helper()
	gw := c.Net.Gateway()
	l, err := net.Listen("tcp", net.JoinHostPort(gw.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	// The injected address is the test's own, with nothing listening: a
	// client misled into using it would fail against the test, not a stranger.
	injected := fmt.Sprintf(`h2="%s:443"; ma=86400`, gw)
	var posts atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Alt-Svc", injected)
		if r.Method == http.MethodPost {
			// The pod's own "not ready" answer to a write it may have
			// acted on (no Retry-After: client-go's own retry stays out).
			posts.Add(1)
			w.Header().Set("X-Kubernetes-Ready", "false")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "pod says hi")
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	defer srv.Close()
	port := l.Addr().(*net.TCPAddr).Port

	admin := kubernetes.NewForConfigOrDie(c.AdminConfig(0))
	// No controller manager runs here: the default service account that the
	// ServiceAccount admission plugin looks up is the test's to make.
	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "injector", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "nowhere", Containers: []corev1.Container{{
			Name: "c", Image: "none", Ports: []corev1.ContainerPort{{ContainerPort: int32(port)}},
		}}},
	}
	created, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.CoreV1().Pods("default").Delete(context.Background(), "injector", *metav1.NewDeleteOptions(0))
	created.Status.Phase = corev1.PodRunning
	created.Status.PodIP = gw.String()
	created.Status.PodIPs = []corev1.PodIP{{IP: gw.String()}}
	if _, err := admin.CoreV1().Pods("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg := c.AdminConfig(0)
	pool, err := altsvcclient.Enable(cfg, altsvcclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	proxyPath := fmt.Sprintf("/api/v1/namespaces/default/pods/injector:%d/proxy/", port)
	for i := 0; i < 5; i++ {
		res := cs.CoreV1().RESTClient().Get().AbsPath(proxyPath).Do(ctx)
		raw, err := res.Raw()
		if err != nil || string(raw) != "pod says hi" {
			t.Fatalf("GET %s: %q, %v", proxyPath, raw, err)
		}
	}
	for _, h := range pool.Hosts() {
		if strings.HasPrefix(h.Host, gw.String()+":") {
			t.Errorf("a client learned the address a pod injected: %+v", pool.Hosts())
		}
	}
	// A pod's 503 with X-Kubernetes-Ready: false is the pod's answer, not
	// a server's refusal: the write is not sent on to another server.
	err = cs.CoreV1().RESTClient().Post().AbsPath(proxyPath + "submit").Body([]byte("once")).Do(ctx).Error()
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("POST through the proxy: %v, want the pod's 503", err)
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("the pod received the write %d times, want once", n)
	}
	// The header as it leaves the server, seen by a plain HTTP/2 client.
	if got := altSvcHeader(t, c, 0, proxyPath, true, true); got != want {
		t.Errorf("Alt-Svc through the proxy subresource: %q, want %q", got, want)
	}
	// And a client using the server normally still works and is where it was.
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if cur := pool.Current(); cur != c.Host(0) {
		t.Errorf("client moved to %s", cur)
	}
}

// TestAlternativeServicesProxyInjectionOneServer: on a lone server, which
// advertises nothing, a pod's Alt-Svc is the only one a client could see.
func TestAlternativeServicesProxyInjectionOneServer(t *testing.T) {
	ctx, c := startHACluster(t, 1, 4*time.Minute)
	checkProxyInjection(ctx, t, c, "")
}

// kubectlRun is a steadyplane kubectl run against a kubeconfig, with HOME
// in the test's directory (where the learned-hosts cache goes).
type kubectlRun struct {
	bin, kubeconfig, home string
}

func newKubectlRun(t *testing.T, c *testenv.HACluster) kubectlRun {
	bin, err := testenv.Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hosts := []string{c.Host(0), c.Host(1), c.Host(2)}
	kc := filepath.Join(dir, "kubeconfig")
	if err := clientconfig.WriteKubeconfig(kc, c.URL(0), "admin", c.PKI.CA, c.PKI.Admin, hosts); err != nil {
		t.Fatal(err)
	}
	return kubectlRun{bin: bin, kubeconfig: kc, home: dir}
}

func (k kubectlRun) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, k.bin, append([]string{"kubectl", "--kubeconfig", k.kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+k.home, "KUBECACHEDIR="+filepath.Join(k.home, "cache"))
	return cmd
}

// checkKubectlSurvivesKill runs "steadyplane kubectl get -w" and a loop of
// "kubectl apply", and kills the kubeconfig's server (host 0) midway: no
// command fails, and the watch reports every object.
func checkKubectlSurvivesKill(ctx context.Context, t *testing.T, c *testenv.HACluster) {
	k := newKubectlRun(t, c)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w := k.command(watchCtx, "get", "configmaps", "-n", "default", "-l", "app=kubectl-test", "-w", "-o", "name")
	out, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	w.Stderr = &stderr
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	watchDone := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			mu.Lock()
			seen[strings.TrimSpace(sc.Text())]++
			mu.Unlock()
		}
		watchDone <- w.Wait()
	}()
	const applies = 24
	for i := 0; i < applies; i++ {
		if i == applies/3 {
			t.Logf("killing %s, the kubeconfig's server, during kubectl get -w and apply", c.Host(0))
			c.KillAPIServer(0)
		}
		manifest := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kt-%d\n  namespace: default\n  labels: {app: kubectl-test}\ndata: {i: %q}\n", i, strconv.Itoa(i))
		apply := k.command(ctx, "apply", "-f", "-")
		apply.Stdin = strings.NewReader(manifest)
		if b, err := apply.CombinedOutput(); err != nil {
			t.Errorf("kubectl apply %d: %v\n%s", i, err, b)
		}
	}
	del := k.command(ctx, "delete", "configmap", "-n", "default", "kt-0")
	if b, err := del.CombinedOutput(); err != nil {
		t.Errorf("kubectl delete after the kill: %v\n%s", err, b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		missing := []string{}
		for i := 0; i < applies; i++ {
			if seen["configmap/kt-"+strconv.Itoa(i)] == 0 {
				missing = append(missing, strconv.Itoa(i))
			}
		}
		deleteSeen := seen["configmap/kt-0"] >= 2 // added, then deleted
		mu.Unlock()
		if len(missing) == 0 && deleteSeen {
			break
		}
		select {
		case err := <-watchDone:
			t.Fatalf("kubectl get -w ended (%v) with %d objects unseen: %v\n%s", err, len(missing), missing, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl get -w never reported %v (delete seen: %v)\n%s", missing, deleteSeen, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	for name, n := range seen {
		if name != "configmap/kt-0" && n != 1 {
			t.Errorf("kubectl get -w reported %s %d times", name, n)
		}
	}
	mu.Unlock()
	select {
	case err := <-watchDone:
		t.Errorf("kubectl get -w ended by itself: %v\n%s", err, stderr.String())
	default:
	}
}
