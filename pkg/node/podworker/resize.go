package podworker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/allocation"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// The kubelet's event reasons for in-place resize (pkg/kubelet/events).
const (
	ReasonResizeStarted    = "ResizeStarted"
	ReasonResizeCompleted  = "ResizeCompleted"
	ReasonResizeError      = "ResizeError"
	ReasonResizeDeferred   = "ResizeDeferred"
	ReasonResizeInfeasible = "ResizeInfeasible"
)

// resizeKind is what a change of a running container's resources asks.
type resizeKind int

const (
	resizeNone    resizeKind = iota // nothing the runtime applies changed
	resizeUpdate                    // the running container's cgroup changes
	resizeRestart                   // the container restarts with the new resources
)

// resizeAction decides, as the kubelet does, what running container c
// needs to go from the resources it runs with to those allocated: the
// settings the runtime applies are the CPU request and limit and the
// memory limit (a memory request changes no setting); a resource that
// changed whose resizePolicy is RestartContainer restarts it.
func resizeAction(c *corev1.Container, running, allocated corev1.ResourceRequirements) resizeKind {
	changed := map[corev1.ResourceName]bool{
		corev1.ResourceCPU: !sameQuantity(running.Requests, allocated.Requests, corev1.ResourceCPU) ||
			!sameQuantity(running.Limits, allocated.Limits, corev1.ResourceCPU),
		corev1.ResourceMemory: !sameQuantity(running.Limits, allocated.Limits, corev1.ResourceMemory),
	}
	kind := resizeNone
	for name, ch := range changed {
		if !ch {
			continue
		}
		kind = max(kind, resizeUpdate)
		for _, p := range c.ResizePolicy {
			if p.ResourceName == name && p.RestartPolicy == corev1.RestartContainer {
				kind = resizeRestart
			}
		}
	}
	return kind
}

func sameQuantity(a, b corev1.ResourceList, name corev1.ResourceName) bool {
	qa, oka := a[name]
	qb, okb := b[name]
	return oka == okb && (!oka || qa.Cmp(qb) == 0)
}

// runtimeResources are the cgroup settings of resources r.
func runtimeResources(r corev1.ResourceRequirements) runtime.Resources {
	var out runtime.Resources
	if m, ok := r.Limits[corev1.ResourceMemory]; ok {
		out.MemoryLimit = m.Value()
	}
	if q, ok := r.Limits[corev1.ResourceCPU]; ok {
		out.CPUMillis = q.MilliValue()
	}
	if q, ok := r.Requests[corev1.ResourceCPU]; ok {
		out.CPURequestMillis = q.MilliValue()
	}
	return out
}

// resizeState is a worker's in-place resize of its pod, as the
// PodResizePending and PodResizeInProgress conditions show it.
type resizeState struct {
	// pending is the reason and message a resize waits with ("" for none).
	pending, pendingMessage string
	// inProgress: a resize was allocated and is not yet applied to every
	// running container; err is why applying it failed last.
	inProgress bool
	err        string
	generation int64
}

// conditions are the resize conditions of s for pod generation gen.
func (s resizeState) conditions() []corev1.PodCondition {
	var out []corev1.PodCondition
	if s.pending != "" {
		out = append(out, corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue,
			Reason: s.pending, Message: s.pendingMessage, ObservedGeneration: s.generation})
	}
	if s.inProgress {
		c := corev1.PodCondition{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue, ObservedGeneration: s.generation}
		if s.err != "" {
			c.Reason, c.Message = corev1.PodReasonError, s.err
		}
		out = append(out, c)
	}
	return out
}

// resize follows the pod's resources in its spec, as the kubelet's
// allocation manager: a change that fits the node is allocated (the
// containers' status shows it at once) and then applied to each running
// container, in place or by a restart as its resizePolicy says; one that
// does not fit waits, Deferred or Infeasible. Each step has its event.
func (w *Worker) resize(ctx context.Context, pod *corev1.Pod, now time.Time) {
	w.allocateResize(pod)
	if w.resizing.inProgress && w.actuateResize(ctx, pod, now) {
		w.resizing = resizeState{generation: pod.Generation}
		w.host.Event(pod, corev1.EventTypeNormal, ReasonResizeCompleted, "Pod resize completed: %s", resizeSummary(pod, ""))
		klog.InfoS("Pod resize completed", "pod", klog.KObj(pod), "generation", pod.Generation)
	}
}

// allocateResize decides a change of the regular containers' resources
// in pod's spec (allocation.Resize): one that fits is allocated to them
// (ResizeStarted, and in progress from then on), one that does not waits
// (ResizeDeferred or ResizeInfeasible, once per reason and generation).
func (w *Worker) allocateResize(pod *corev1.Pod) {
	desired := map[string]*corev1.Container{}
	for i := range pod.Spec.Containers {
		desired[pod.Spec.Containers[i].Name] = &pod.Spec.Containers[i]
	}
	changed := false
	for _, c := range w.containers {
		if d := desired[c.spec.Name]; d != nil && !c.init && !c.ephemeral && !equality.Semantic.DeepEqual(d.Resources, c.spec.Resources) {
			changed = true
		}
	}
	if !changed {
		w.resizing.pending, w.resizing.pendingMessage = "", ""
		return
	}
	reason, message := allocation.Resize(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}), w.node.Allocatable, w.host.Requested(pod.UID))
	if reason != "" {
		// Once per reason and generation, as the kubelet (the message's
		// "used" changes as other pods come and go).
		if w.resizing.pending != reason || w.resizing.generation != pod.Generation {
			ev := ReasonResizeDeferred
			if reason == corev1.PodReasonInfeasible {
				ev = ReasonResizeInfeasible
			}
			w.host.Event(pod, corev1.EventTypeWarning, ev, "Pod resize %s: %s", reason, resizeSummary(pod, message))
		}
		w.resizing.pending, w.resizing.pendingMessage, w.resizing.generation = reason, message, pod.Generation
		return
	}
	for _, c := range w.containers {
		if d := desired[c.spec.Name]; d != nil && !c.init && !c.ephemeral {
			c.spec.Resources = *d.Resources.DeepCopy()
			c.spec.ResizePolicy = d.ResizePolicy
		}
	}
	// Every regular container now has the pod's resources.
	w.mu.Lock()
	w.allocated = pod
	w.mu.Unlock()
	w.resizing = resizeState{inProgress: true, generation: pod.Generation}
	w.host.Event(pod, corev1.EventTypeNormal, ReasonResizeStarted, "Pod resize started: %s", resizeSummary(pod, ""))
	klog.InfoS("Pod resize started", "pod", klog.KObj(pod), "generation", pod.Generation)
}

// actuateResize applies what is allocated to each running regular
// container, in place (its cgroup) or by a restart as its resizePolicy
// says (resizeAction), and reports whether every one has it. A container
// not running gets it at its next run; only a restart for this resize
// keeps it in progress (a container that crash-loops does not hold the
// resize, as with the kubelet).
func (w *Worker) actuateResize(ctx context.Context, pod *corev1.Pod, now time.Time) bool {
	done := true
	for _, c := range w.containers {
		if c.init || c.ephemeral || c.phase == phaseTerminated {
			continue
		}
		if c.phase != phaseRunning || c.run == nil || c.running == nil {
			if c.phase == phaseKilling || c.resizeRestart {
				done = false
			}
			continue
		}
		switch resizeAction(&c.spec, *c.running, c.spec.Resources) {
		case resizeNone:
			c.running = c.spec.Resources.DeepCopy()
		case resizeRestart:
			done = false
			w.apply(ctx, pod, c, event{kind: evResizeRestart}, now)
		case resizeUpdate:
			if !w.resizeInPlace(ctx, pod, c) {
				done = false
			}
		}
	}
	return done
}

// resizeInPlace changes running container c's cgroup to what it is
// allocated, and reports whether it did; a failure is an event
// (ResizeError, once per message) and is tried again at the next sync.
func (w *Worker) resizeInPlace(ctx context.Context, pod *corev1.Pod, c *container) bool {
	r, ok := c.run.(runtime.Resizable)
	if !ok {
		// The process runtime applies no resources at all.
		c.running = c.spec.Resources.DeepCopy()
		return true
	}
	want := runtimeResources(c.spec.Resources)
	err := memoryLimitAboveUse(c.run, want.MemoryLimit)
	if err == nil {
		err = r.Resize(ctx, want)
	}
	if err != nil {
		msg := fmt.Sprintf("container %s: %v", c.spec.Name, err)
		if w.resizing.err != msg {
			w.host.Event(pod, corev1.EventTypeWarning, ReasonResizeError, "Pod resize error: %s", resizeSummary(pod, msg))
		}
		w.resizing.err = msg
		return false
	}
	c.running = c.spec.Resources.DeepCopy()
	if c.runSpec != nil {
		c.runSpec.Resources = want
	}
	return true
}

// memoryLimitAboveUse refuses a memory limit below what run uses now, as
// the kubelet does: the kernel would reclaim and then OOM-kill rather
// than refuse it.
func memoryLimitAboveUse(run runtime.Container, limit int64) error {
	m, ok := run.(runtime.Measured)
	if limit <= 0 || !ok {
		return nil
	}
	if u, ok := m.Usage(); ok && u.MemoryWorkingSet > limit {
		return fmt.Errorf("attempting to set the memory limit (%d) below the container's memory use (%d)", limit, u.MemoryWorkingSet)
	}
	return nil
}

// resizeSummary is the resources of pod's containers as the kubelet's
// resize events give them: JSON with the generation and any error.
func resizeSummary(pod *corev1.Pod, errMsg string) string {
	type allocation struct {
		Name      string                      `json:"name"`
		Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	}
	summary := struct {
		Containers []allocation `json:"containers,omitempty"`
		Generation int64        `json:"generation"`
		Error      string       `json:"error,omitempty"`
	}{Generation: pod.Generation, Error: errMsg}
	for _, c := range pod.Spec.Containers {
		summary.Containers = append(summary.Containers, allocation{Name: c.Name, Resources: c.Resources})
	}
	b, err := json.Marshal(summary)
	if err != nil {
		return errMsg
	}
	return string(b)
}
