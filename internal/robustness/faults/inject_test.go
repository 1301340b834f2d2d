package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// recordingCluster records what the injector asked, in order.
type recordingCluster struct {
	mu    sync.Mutex
	calls []string
	fail  string
}

func (r *recordingCluster) add(s string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
	if s == r.fail {
		return errors.New("refused")
	}
	return nil
}

func (r *recordingCluster) Signal(host int, component string, sig syscall.Signal) error {
	return r.add(fmt.Sprintf("%s %s %d", unix.SignalName(sig), component, host))
}
func (r *recordingCluster) KillHost(host int) error { return r.add(fmt.Sprintf("kill host %d", host)) }
func (r *recordingCluster) StartHost(_ context.Context, host int) error {
	return r.add(fmt.Sprintf("start host %d", host))
}
func (r *recordingCluster) BlackHole(host int) error { return r.add(fmt.Sprintf("blackhole %d", host)) }
func (r *recordingCluster) Restore(host int) error   { return r.add(fmt.Sprintf("restore %d", host)) }
func (r *recordingCluster) Lossy(host, percent int) error {
	return r.add(fmt.Sprintf("lossy %d %d%%", host, percent))
}
func (r *recordingCluster) Unlossy(host, percent int) {
	_ = r.add(fmt.Sprintf("unlossy %d %d%%", host, percent))
}

func TestInject(t *testing.T) {
	ms := time.Millisecond
	plan := []Fault{
		{Kind: PauseEtcd, Host: 1, At: 10 * ms, For: 60 * ms},
		{Kind: BlackHole, Host: 1, At: 20 * ms, For: 20 * ms},
		{Kind: Lossy, Host: 2, At: 30 * ms, For: 50 * ms, LossPercent: 20},
		{Kind: KillAPIServer, Host: 0, At: 100 * ms, For: 10 * ms},
	}
	c := &recordingCluster{fail: "blackhole 1"}
	start := time.Now()
	since := func() time.Duration { return time.Since(start) }
	applied := Inject(context.Background(), c, plan, since, t.Logf)
	want := []string{"SIGSTOP etcd 1", "blackhole 1", "lossy 2 20%", "SIGCONT etcd 1", "unlossy 2 20%", "SIGKILL apiserver 0"}
	if !slices.Equal(c.calls, want) {
		t.Errorf("calls %q, want %q", c.calls, want)
	}
	for i, a := range applied {
		if a.Began < a.At || a.Ended < a.Began {
			t.Errorf("fault %d applied %+v", i, a)
		}
		if (a.Err != "") != (a.Kind == BlackHole) {
			t.Errorf("fault %d: err %q", i, a.Err)
		}
	}
	if applied[0].Ended < 70*ms {
		t.Errorf("the pause ended at %s, before its 70 ms", applied[0].Ended)
	}
}

func TestInjectStopsWithTheRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c := &recordingCluster{}
	start := time.Now()
	applied := Inject(ctx, c, []Fault{
		{Kind: PauseAPIServer, Host: 0, At: 10 * time.Millisecond, For: time.Hour},
		{Kind: KillHost, Host: 1, At: time.Hour, For: time.Minute},
	}, func() time.Duration { return time.Since(start) }, t.Logf)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Inject took %s after its run ended", took)
	}
	// The pause is undone; the kill never began.
	if want := []string{"SIGSTOP apiserver 0", "SIGCONT apiserver 0"}; !slices.Equal(c.calls, want) {
		t.Errorf("calls %q, want %q", c.calls, want)
	}
	if applied[1].Err == "" {
		t.Errorf("the fault after the run: %+v, want it marked not applied", applied[1])
	}
}
