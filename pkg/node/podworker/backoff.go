package podworker

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Crash-loop backoff, as the kubelet's: the first restart is immediate, then
// 10s doubling to 5 minutes; a container that ran for 10 minutes starts over.
const (
	initialBackoff = 10 * time.Second
	maxBackoff     = 5 * time.Minute
	backoffReset   = 10 * time.Minute
)

// RestartDelay returns how long to wait before restarting a container that
// exited after running for ranFor, given the backoff it had (0 at first),
// and the backoff to keep for its next exit.
func RestartDelay(backoff, ranFor time.Duration) (delay, next time.Duration) {
	if ranFor >= backoffReset {
		backoff = 0
	}
	if backoff == 0 {
		return 0, initialBackoff
	}
	next = 2 * backoff
	if next > maxBackoff {
		next = maxBackoff
	}
	return backoff, next
}

// RetryUntilDone calls attempt until it reports done or ctx ends, waiting
// b's delays in between; once the delays reach b.Cap they stay there. Unlike
// wait.ExponentialBackoff, which stops at the cap, it never gives up: the
// agent waits for an API server, or retries a deletion, for as long as it
// runs. It reports whether attempt succeeded.
func RetryUntilDone(ctx context.Context, b wait.Backoff, attempt func(context.Context) bool) bool {
	for {
		if attempt(ctx) {
			return true
		}
		t := time.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}
