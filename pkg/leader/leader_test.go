package leader

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

const testNamespace, testLease = "steadyplane-system", "test-lease"

// Run runs the work only while it holds the lease, stops the work
// before it hands the lease back, and says why it returned.
func TestRun(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	holder := func(t *testing.T, client *kubefake.Clientset) string {
		l, err := client.CoordinationV1().Leases(testNamespace).Get(context.Background(), testLease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	newLock := func(t *testing.T, client *kubefake.Clientset, id string) resourcelock.Interface {
		lock, err := resourcelock.New(resourcelock.LeasesResourceLock, testNamespace, testLease, client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
		if err != nil {
			t.Fatal(err)
		}
		return lock
	}

	t.Run("stopped: the work ends before the lease is handed back", func(t *testing.T) {
		client := kubefake.NewClientset()
		ctx, cancel := context.WithCancel(context.Background())
		working := make(chan struct{})
		var heldWhenStopped string
		run := func(runCtx context.Context) error {
			close(working)
			<-runCtx.Done()
			heldWhenStopped = holder(t, client)
			return nil
		}
		done := make(chan error, 1)
		go func() { done <- Run(ctx, newLock(t, client, "s0"), quiet, run, nil) }()
		select {
		case <-working:
		case <-time.After(20 * time.Second):
			t.Fatal("never led")
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("a stop returned %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("did not return")
		}
		if heldWhenStopped != "s0" {
			t.Errorf("when the work stopped the lease was held by %q, want still s0", heldWhenStopped)
		}
		if h := holder(t, client); h != "" {
			t.Errorf("after the stop the lease is held by %q, want it handed back", h)
		}
	})

	t.Run("another holds the lease: no work", func(t *testing.T) {
		client := kubefake.NewClientset()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		other := make(chan struct{})
		go func() {
			_ = Run(ctx, newLock(t, client, "s1"), quiet, func(c context.Context) error { close(other); <-c.Done(); return nil }, nil)
		}()
		<-other
		errs := make(chan error, 1)
		ran := false
		go func() {
			time.Sleep(3 * time.Second)
			errs <- errors.New("metrics server failed")
		}()
		err := Run(ctx, newLock(t, client, "s2"), quiet, func(context.Context) error { ran = true; return nil }, errs)
		if err == nil || !strings.Contains(err.Error(), "metrics server failed") || ran {
			t.Errorf("second operator: %v, ran %v; want the error from errs and no work", err, ran)
		}
	})

	t.Run("the work fails", func(t *testing.T) {
		client := kubefake.NewClientset()
		err := Run(context.Background(), newLock(t, client, "s0"), quiet, func(context.Context) error { return errors.New("informers") }, nil)
		if err == nil || err.Error() != "informers" {
			t.Errorf("%v, want the work's error", err)
		}
	})
}
