package patient

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

func TestRetried(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	pods := schema.GroupResource{Resource: "pods"}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"success", nil, false},
		{"connection refused (the API server is down)", refused, true},
		{"connection refused, wrapped by the client", fmt.Errorf("Get \"https://127.0.0.1:6443/api/v1/pods\": %w", refused), true},
		{"connection reset (it died mid-answer)", &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"503 (shutting down)", apierrors.NewServiceUnavailable("shutting down"), true},
		{"429 (not ready yet, or shedding load)", apierrors.NewTooManyRequests("wait", 1), true},
		{"403: an answer, not an absence", apierrors.NewForbidden(pods, "", fmt.Errorf("no")), false},
		{"410 Gone: the reflector relists", apierrors.NewResourceExpired("too old"), false},
		{"cancelled", context.Canceled, false},
		{"deadline", fmt.Errorf("list: %w", context.DeadlineExceeded), false},
	} {
		if got := Retried(c.err); got != c.want {
			t.Errorf("%s: Retried(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// failing is a ListerWatcher whose first n calls fail with err.
func failing(n int, err error, calls *int) cache.ListerWatcher {
	return &cache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			*calls++
			if *calls <= n {
				return nil, err
			}
			return &corev1.PodList{}, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) {
			*calls++
			if *calls <= n {
				return nil, err
			}
			return watch.NewFake(), nil
		},
	}
}

func TestListerWatcher(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	o := Options{Interval: time.Millisecond, Patience: time.Second}
	for _, c := range []struct {
		name      string
		failures  int
		err       error
		o         Options
		wantErr   bool
		wantCalls int
	}{
		{"answers at once", 0, nil, o, false, 1},
		{"down for three attempts, then back", 3, refused, o, false, 4},
		{"a 403 goes to the reflector at once", 3, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", fmt.Errorf("no")), o, true, 1},
		{"down beyond the patience: the error goes to the reflector", 1 << 30, refused, Options{Interval: 10 * time.Millisecond, Patience: 50 * time.Millisecond}, true, 5},
	} {
		for _, op := range []string{"list", "watch"} {
			calls := 0
			lw := ListerWatcher(context.Background(), failing(c.failures, c.err, &calls), c.o)
			var err error
			if op == "list" {
				_, err = lw.List(metav1.ListOptions{})
			} else {
				var w watch.Interface
				if w, err = lw.Watch(metav1.ListOptions{}); w != nil {
					w.Stop()
				}
			}
			if (err != nil) != c.wantErr || calls > c.wantCalls || (!c.wantErr && calls != c.wantCalls) {
				t.Errorf("%s (%s): error %v after %d calls; want error %v after %d", c.name, op, err, calls, c.wantErr, c.wantCalls)
			}
		}
	}
}

func TestListerWatcherStopsWithContext(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	lw := ListerWatcher(ctx, failing(1<<30, refused, &calls), Options{Interval: 10 * time.Millisecond, Patience: time.Hour})
	time.AfterFunc(50*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() { _, err := lw.List(metav1.ListOptions{}); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a list cancelled while the server is down succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the list did not return within 10s of its context ending")
	}
}
