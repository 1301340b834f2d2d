package podworker

import (
	"context"
	"os/exec"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/steadyplane/steadyplane/pkg/node/probe"
)

// startProbes runs c's probes until the container exits; each result that
// changes a verdict wakes the worker at once.
func (w *Worker) startProbes(ctx context.Context, pod *corev1.Pod, c *container, env []string) {
	ctx, cancel := context.WithCancel(ctx)
	c.probesCancel = cancel
	// Probe goroutines of the previous run may still report: trackers are
	// only ever touched under the lock.
	w.mu.Lock()
	c.readiness, c.liveness, c.startup = newTrackers()
	if r := c.reported; r != nil {
		c.readiness.Resume(r.ready)
		c.startup.Resume(r.started)
		c.reported = nil
	}
	w.mu.Unlock()
	spec, run, ip := c.spec, c.run, w.setup.ips[0]
	start := func(kind probe.Kind, p *corev1.Probe, tr *probe.Tracker) {
		if p == nil {
			return
		}
		go func() {
			delay := time.Duration(p.InitialDelaySeconds) * time.Second
			t := time.NewTimer(delay)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				// Liveness and readiness wait for the startup probe.
				if kind != probe.Startup && spec.StartupProbe != nil && !w.verdict(c, probe.Startup) {
					t.Reset(probe.Period(p))
					continue
				}
				ok, msg := probe.Run(ctx, p, ip, &spec, func(argv []string) *exec.Cmd { return run.Command(argv, env, spec.WorkingDir, false) })
				if ctx.Err() != nil {
					return
				}
				if !ok {
					w.host.Event(pod, corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", kind, msg)
				}
				w.mu.Lock()
				changed := tr.Observe(p, ok)
				w.mu.Unlock()
				if changed {
					w.Poke()
				}
				if kind == probe.Startup && tr.Passing() {
					return // a startup probe stops once it succeeded
				}
				t.Reset(probe.Period(p))
			}
		}()
	}
	start(probe.Startup, spec.StartupProbe, c.startup)
	start(probe.Readiness, spec.ReadinessProbe, c.readiness)
	start(probe.Liveness, spec.LivenessProbe, c.liveness)
}

// reportedVerdicts are the readiness and startup verdicts a previous node
// agent reported for a run.
type reportedVerdicts struct{ ready, started bool }

// reportedOf is what pod's status says of c's run id: the verdicts a
// previous agent reached on it, found when the status names that run.
func reportedOf(pod *corev1.Pod, name, id string) (*reportedVerdicts, bool) {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, s := range list {
			if s.Name == name && s.ContainerID == id && s.State.Running != nil {
				return &reportedVerdicts{ready: s.Ready, started: s.Started != nil && *s.Started}, true
			}
		}
	}
	return nil, false
}

// newTrackers returns the readiness, liveness and startup trackers of a
// container whose probes have not run yet.
func newTrackers() (readiness, liveness, startup *probe.Tracker) {
	return probe.NewTracker(probe.Readiness), probe.NewTracker(probe.Liveness), probe.NewTracker(probe.Startup)
}

func (w *Worker) verdict(c *container, kind probe.Kind) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch kind {
	case probe.Startup:
		return c.startup.Passing()
	case probe.Readiness:
		return c.readiness.Passing()
	}
	return c.liveness.Passing()
}

func (w *Worker) stopProbes(c *container) {
	if c.probesCancel != nil {
		c.probesCancel()
		c.probesCancel = nil
	}
}
