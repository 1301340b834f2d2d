package podworker

import (
	"context"
	"math"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestRestartDelay(t *testing.T) {
	var backoff time.Duration
	var delays []time.Duration
	for i := 0; i < 8; i++ {
		var d time.Duration
		d, backoff = RestartDelay(backoff, time.Second)
		delays = append(delays, d)
	}
	want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second}
	for i := range want {
		if delays[i] != want[i] {
			t.Fatalf("delays %v, want %v", delays, want)
		}
	}
	if d, next := RestartDelay(maxBackoff, 10*time.Minute); d != 0 || next != initialBackoff {
		t.Errorf("after a 10-minute run: delay %v next %v, want a fresh start", d, next)
	}
	if d, _ := RestartDelay(40*time.Second, 9*time.Minute); d != 40*time.Second {
		t.Errorf("after a 9-minute run the backoff is kept: %v", d)
	}
}

// TestRetryUntilDoneOutlastsTheCap checks that retries go on at the cap,
// where wait.ExponentialBackoff gives up (the agent once took "no API server
// for 31s" as registered), and that a cancelled context ends them.
func TestRetryUntilDoneOutlastsTheCap(t *testing.T) {
	b := wait.Backoff{Duration: time.Millisecond, Factor: 2, Cap: 4 * time.Millisecond, Steps: math.MaxInt32}
	attempts := 0
	ok := RetryUntilDone(context.Background(), b, func(context.Context) bool {
		attempts++
		return attempts == 20
	})
	if !ok || attempts != 20 {
		t.Errorf("RetryUntilDone = %v after %d attempts, want success at the 20th", ok, attempts)
	}
	if err := wait.ExponentialBackoffWithContext(context.Background(), b, func(context.Context) (bool, error) { return false, nil }); err == nil {
		t.Error("wait.ExponentialBackoff no longer gives up at its cap; RetryUntilDone may be simplified")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if RetryUntilDone(ctx, b, func(context.Context) bool { return false }) {
		t.Error("RetryUntilDone succeeded without a successful attempt")
	}
}
