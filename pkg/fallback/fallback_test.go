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

func TestMode(t *testing.T) {
	for _, tt := range []struct {
		in      string
		wantErr bool
	}{{"auto", false}, {"on", false}, {"off", false}, {"", true}, {"yes", true}, {"On", true}} {
		m := ModeAuto
		err := m.Set(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("Set(%q) = %v, want error %v", tt.in, err, tt.wantErr)
		}
		if err == nil && m.String() != tt.in {
			t.Errorf("Set(%q) then String() = %q", tt.in, m.String())
		}
		if err != nil && m != ModeAuto {
			t.Errorf("a refused Set(%q) changed the mode to %q", tt.in, m)
		}
	}
	for _, tt := range []struct {
		m        Mode
		possible bool
		want     bool
	}{{ModeAuto, true, true}, {ModeAuto, false, false}, {ModeOn, true, true}, {ModeOn, false, false}, {ModeOff, true, false}, {ModeOff, false, false}} {
		if got := tt.m.Enabled(tt.possible); got != tt.want {
			t.Errorf("%s.Enabled(%v) = %v, want %v", tt.m, tt.possible, got, tt.want)
		}
	}
}
