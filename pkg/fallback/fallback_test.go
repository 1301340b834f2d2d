package fallback

import (
	"testing"
	"time"
)

func TestRetried(t *testing.T) {
	for r, want := range map[Reason]bool{NeverStartedUp: false, CrashLooping: false, Unhealthy: true, EtcdUnhealthy: true, NotReady: true} {
		if Retried(r) != want {
			t.Errorf("Retried(%s) = %v, want %v", r, !want, want)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	base, cap := 10*time.Minute, 6*time.Hour
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{
		{0, 10 * time.Minute}, {1, 10 * time.Minute}, {2, 20 * time.Minute}, {3, 40 * time.Minute},
		{5, 160 * time.Minute}, {6, 320 * time.Minute}, {7, 6 * time.Hour}, {1000, 6 * time.Hour},
	} {
		if got := RetryDelay(c.attempt, base, cap); got != c.want {
			t.Errorf("RetryDelay(%d) = %v, want %v", c.attempt, got, c.want)
		}
	}
	if got := RetryDelay(3, time.Second, 2*time.Second); got != 2*time.Second {
		t.Errorf("short flags for tests: %v", got)
	}
}
