package ifreadyfilter

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Latch records that the server has fully initialized: the first time a full
// /readyz answered 200. Once set it stays set for the life of the process, so a
// later /readyz failure (etcd blip, shutdown) never brings back the 503s of
// initialization.
type Latch struct {
	set     atomic.Bool
	once    sync.Once
	done    chan struct{}
	clock   clock.PassiveClock
	started time.Time
	elapsed atomic.Int64 // nanoseconds from creation to Set; 0 until then
}

// NewLatch returns an unset latch whose Elapsed is measured from now on clk.
func NewLatch(clk clock.PassiveClock) *Latch {
	return &Latch{done: make(chan struct{}), clock: clk, started: clk.Now()}
}

// IsSet reports whether the server has fully initialized. It is one atomic
// load, cheap enough for every request.
func (l *Latch) IsSet() bool { return l.set.Load() }

// Done returns a channel that is closed when the latch is set.
func (l *Latch) Done() <-chan struct{} { return l.done }

// Elapsed returns how long the server took to initialize, or 0 if it has not.
func (l *Latch) Elapsed() time.Duration { return time.Duration(l.elapsed.Load()) }

// Set marks the server initialized. It reports whether this call was the one
// that set it; later calls do nothing.
func (l *Latch) Set() bool {
	first := false
	l.once.Do(func() {
		first = true
		d := l.clock.Since(l.started)
		if d <= 0 {
			d = time.Nanosecond // keep Elapsed distinguishable from "not set"
		}
		l.elapsed.Store(int64(d))
		l.set.Store(true)
		close(l.done)
		initializedGauge.Set(1)
		initializationSeconds.Set(d.Seconds())
		klog.InfoS("Server fully initialized; requests with X-Kubernetes-If-Ready are served from now on", "after", d)
	})
	return first
}
