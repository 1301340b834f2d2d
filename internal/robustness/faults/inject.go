package faults

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// Cluster is what the injector acts on: the servers of a cluster, by
// index. Each method returns once the fault is in place.
type Cluster interface {
	// Signal sends sig to every process of a component ("apiserver",
	// "etcd") on host.
	Signal(host int, component string, sig syscall.Signal) error
	// KillHost kills every process of host with SIGKILL, StartHost starts
	// its server again (as a service manager would) and returns once it
	// is up.
	KillHost(host int) error
	StartHost(ctx context.Context, host int) error
	// BlackHole cuts host's link; Restore mends it.
	BlackHole(host int) error
	Restore(host int) error
	// Lossy drops percent of host's packets; Unlossy stops it.
	Lossy(host, percent int) error
	Unlossy(host, percent int)
}

// Applied is a fault as it happened: when it began and when its effect
// ended (a killed host's up back, a pause's SIGCONT sent), since the run
// began, and what went wrong doing it.
type Applied struct {
	Fault
	Began time.Duration `json:"began"`
	Ended time.Duration `json:"ended"`
	Err   string        `json:"err,omitempty"`
}

// hostRestartDelay is how long a killed host stays off before its up is
// started again.
const hostRestartDelay = 5 * time.Second

// hostStartTimeout bounds a killed host's start again.
const hostStartTimeout = 5 * time.Minute

// Inject applies plan to c as the run's clock (since) reaches each
// fault's At, each fault in its own goroutine so that they overlap as
// planned, and returns what happened once every fault is over (or ctx
// ends: faults under way are undone first). A kill's effect ends when the
// plan's time for it is up; a killed host's when its up is back.
func Inject(ctx context.Context, c Cluster, plan []Fault, since func() time.Duration, logf func(string, ...any)) []Applied {
	out := make([]Applied, len(plan))
	var wg sync.WaitGroup
	for i, f := range plan {
		wg.Go(func() {
			if !sleepUntil(ctx, since, f.At) {
				out[i] = Applied{Fault: f, Began: since(), Ended: since(), Err: "not applied: the run ended"}
				return
			}
			a := Applied{Fault: f, Began: since()}
			logf("fault %s on server %d for %s", f.Kind, f.Host, f.For)
			if err := apply(ctx, c, f, since); err != nil {
				a.Err = err.Error()
				logf("fault %s on server %d: %v", f.Kind, f.Host, err)
			}
			a.Ended = since()
			out[i] = a
		})
	}
	wg.Wait()
	return out
}

// apply puts f in place, waits its time and undoes it. The undo does not
// heed ctx: a paused process or a cut link must not outlive the run.
func apply(ctx context.Context, c Cluster, f Fault, since func() time.Duration) error {
	hold := func() { sleepUntil(ctx, since, f.End()) }
	switch f.Kind {
	case KillAPIServer, KillEtcd:
		err := c.Signal(f.Host, component(f.Kind), syscall.SIGKILL)
		hold()
		return err
	case PauseAPIServer, PauseEtcd:
		if err := c.Signal(f.Host, component(f.Kind), syscall.SIGSTOP); err != nil {
			return err
		}
		hold()
		return c.Signal(f.Host, component(f.Kind), syscall.SIGCONT)
	case BlackHole:
		if err := c.BlackHole(f.Host); err != nil {
			return err
		}
		hold()
		return c.Restore(f.Host)
	case Lossy:
		if err := c.Lossy(f.Host, f.LossPercent); err != nil {
			return err
		}
		hold()
		c.Unlossy(f.Host, f.LossPercent)
		return nil
	case KillHost:
		if err := c.KillHost(f.Host); err != nil {
			return err
		}
		sleepUntil(ctx, since, f.At+hostRestartDelay)
		// Started again even when the run ends (a test stops it
		// cleanly), but not waited for without end.
		startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostStartTimeout)
		err := c.StartHost(startCtx, f.Host)
		cancel()
		hold()
		return err
	}
	return fmt.Errorf("unknown fault %q", f.Kind)
}

// component is the process a fault of kind acts on.
func component(kind Kind) string {
	switch kind {
	case KillEtcd, PauseEtcd:
		return "etcd"
	}
	return "apiserver"
}

// sleepUntil waits until since reaches t; false when ctx ended first.
func sleepUntil(ctx context.Context, since func() time.Duration, t time.Duration) bool {
	d := t - since()
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
