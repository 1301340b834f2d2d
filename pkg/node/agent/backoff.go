package agent

import "time"

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

// ShouldRestart decides whether a container that exited with code is started
// again under the pod's restart policy.
func ShouldRestart(policy string, exitCode int32) bool {
	switch policy {
	case "Never":
		return false
	case "OnFailure":
		return exitCode != 0
	default: // Always, and the API's default
		return true
	}
}
