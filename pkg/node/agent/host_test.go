package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestPatchStatusEndsWithItsContext: a status write to an API server that
// holds it (one that is not ready answers 503 with Retry-After, and
// client-go retries for up to ~50s) gives up when its context ends, which
// a pod worker ends as soon as its pod retires
// (podworker.TestStatusWriteEndsWithThePod).
func TestPatchStatusEndsWithItsContext(t *testing.T) {
	// held has room for the first request's signal: the handler may run
	// before the test waits for it (a loaded machine), and must not drop it.
	held, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case held <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release) // before Close, which waits for the handlers
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	a := &Agent{client: kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL}), opts: Options{NodeIP: "127.0.0.1", RootDir: t.TempDir()}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_, _, _ = a.PatchStatus(ctx, pod, func(target *corev1.Pod) corev1.PodStatus {
			return corev1.PodStatus{Phase: corev1.PodRunning}
		})
		close(done)
	}()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the status write never reached the server")
	}
	start := time.Now()
	cancel()
	select {
	case <-done:
		t.Logf("the write gave up %v after its context ended", time.Since(start).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("a status write in flight outlived its context by 3s")
	}
}
