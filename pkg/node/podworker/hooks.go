package podworker

import (
	"context"
	"os/exec"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/probe"
)

// hookRunner returns what runs lifecycle handler h against c's current run:
// exec commands in the container with the run's environment, HTTP hooks at
// the pod's address. It touches none of the worker's fields when called, so
// that a preStop hook may run while the worker goes on.
func (w *Worker) hookRunner(pod *corev1.Pod, c *container, h *corev1.LifecycleHandler) func(ctx context.Context) (string, error) {
	run, spec := c.run, c.spec
	var env []string
	if c.runSpec != nil {
		env = c.runSpec.Env
	}
	ip := w.node.IP
	if len(w.setup.ips) > 0 {
		ip = w.setup.ips[0]
	}
	return func(ctx context.Context) (string, error) {
		return probe.RunHook(ctx, h, pod, ip, &spec, func(argv []string) *exec.Cmd { return run.Command(argv, env, spec.WorkingDir, false) })
	}
}

// postStart runs c's postStart hook on the run just started, as the
// kubelet does: the pod's other containers wait for it (a sidecar's hook
// holds the next init container back), the pod's deletion ends it, and a
// hook that fails is an event (FailedPostStartHook) and stops the run,
// whose end it answers with (the restart policy decides what follows).
func (w *Worker) postStart(ctx context.Context, pod *corev1.Pod, c *container) (event, bool) {
	lc := c.spec.Lifecycle
	if lc == nil || lc.PostStart == nil || c.run == nil {
		return event{}, false
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if w.hooks != nil {
		defer context.AfterFunc(w.hooks, cancel)()
	}
	msg, err := w.hookRunner(pod, c, lc.PostStart)(hctx)
	if err == nil || hctx.Err() != nil {
		// Cut short by the pod's deletion, which stops the run, or by the
		// agent's stop, after which the run goes on for the next agent.
		return event{}, false
	}
	klog.InfoS("PostStart hook failed; stopping the container", "pod", klog.KObj(pod), "container", c.spec.Name, "err", err)
	hookFailures.WithLabelValues("postStart").Inc()
	w.host.Event(pod, corev1.EventTypeWarning, "FailedPostStartHook", "%s", msg)
	w.host.Event(pod, corev1.EventTypeNormal, "Killing", "Container %s failed its postStart hook, will be stopped", c.spec.Name)
	w.stopperOf(pod, c, true).stop(time.Now().Add(gracePeriod(pod)), true, nil)
	return w.exited(pod, c), true
}
