package agent

import (
	"testing"
	"time"
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

func TestShouldRestart(t *testing.T) {
	tests := []struct {
		policy string
		code   int32
		want   bool
	}{
		{"Always", 0, true}, {"Always", 1, true}, {"", 0, true},
		{"OnFailure", 0, false}, {"OnFailure", 2, true},
		{"Never", 0, false}, {"Never", 1, false},
	}
	for _, tt := range tests {
		if got := ShouldRestart(tt.policy, tt.code); got != tt.want {
			t.Errorf("ShouldRestart(%q, %d) = %v", tt.policy, tt.code, got)
		}
	}
}
