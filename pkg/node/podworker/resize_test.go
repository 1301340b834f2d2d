package podworker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

func resources(pairs ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(pairs); i += 2 {
		l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return l
}

func TestResizeAction(t *testing.T) {
	req := func(r, l corev1.ResourceList) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: r, Limits: l}
	}
	restartMemory := []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	restartCPU := []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.RestartContainer}}
	base := req(resources("cpu", "20m", "memory", "35Mi"), resources("cpu", "30m", "memory", "45Mi"))
	for _, tc := range []struct {
		name      string
		policy    []corev1.ContainerResizePolicy
		allocated corev1.ResourceRequirements
		want      resizeKind
	}{
		{"unchanged", nil, base, resizeNone},
		{"the same amounts written differently", nil, req(resources("cpu", "0.02", "memory", "35Mi"), resources("cpu", "0.03", "memory", "45Mi")), resizeNone},
		{"memory request only: nothing to apply", restartMemory, req(resources("cpu", "20m", "memory", "40Mi"), resources("cpu", "30m", "memory", "45Mi")), resizeNone},
		{"cpu request, in place", nil, req(resources("cpu", "25m", "memory", "35Mi"), resources("cpu", "30m", "memory", "45Mi")), resizeUpdate},
		{"cpu limit, in place though memory restarts", restartMemory, req(resources("cpu", "20m", "memory", "35Mi"), resources("cpu", "35m", "memory", "45Mi")), resizeUpdate},
		{"memory limit with RestartContainer", restartMemory, req(resources("cpu", "20m", "memory", "35Mi"), resources("cpu", "30m", "memory", "50Mi")), resizeRestart},
		{"cpu request with RestartContainer for cpu", restartCPU, req(resources("cpu", "15m", "memory", "35Mi"), resources("cpu", "30m", "memory", "45Mi")), resizeRestart},
		{"a limit added", nil, req(resources("cpu", "20m", "memory", "35Mi"), resources("cpu", "30m", "memory", "45Mi", "ephemeral-storage", "1Gi")), resizeNone},
		{"a memory limit removed", nil, req(resources("cpu", "20m", "memory", "35Mi"), resources("cpu", "30m")), resizeUpdate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &corev1.Container{Name: "c", ResizePolicy: tc.policy}
			if got := resizeAction(c, base, tc.allocated); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// resizableRun is a fake run that records the resources it is given.
type resizableRun struct {
	*fakeRun
	applied []runtime.Resources
	fail    error
}

func (r *resizableRun) Resize(_ context.Context, res runtime.Resources) error {
	if r.fail != nil {
		return r.fail
	}
	r.applied = append(r.applied, res)
	return nil
}

// TestWorkerResize drives a resize through the worker: a fitting one is
// allocated, applied in place and reported; one larger than the node is
// Infeasible and keeps what runs; a failed update is an error the next
// sync retries.
func TestWorkerResize(t *testing.T) {
	pod := fakePod(corev1.RestartPolicyAlways)
	pod.Generation = 1
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: resources("cpu", "100m", "memory", "64Mi"), Limits: resources("cpu", "200m", "memory", "64Mi")}
	h := newFakeHost()
	h.capacity = resources("cpu", "2", "memory", "1Gi")
	rt := &fakeRuntime{}
	w := newFakeWorker(h, rt, t.TempDir(), pod, false)
	ctx, now := context.Background(), time.Now()
	w.sync(ctx, pod, now)
	run := &resizableRun{fakeRun: rt.last()}
	w.containers[0].run = run

	resized := pod.DeepCopy()
	resized.Generation = 2
	resized.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: resources("cpu", "300m", "memory", "64Mi"), Limits: resources("cpu", "400m", "memory", "96Mi")}
	run.fail = errors.New("test failure")
	w.sync(ctx, resized, now)
	st := w.status(resized)
	if got := st.ContainerStatuses[0].AllocatedResources.Cpu().String(); got != "300m" {
		t.Errorf("allocated cpu %s, want 300m at once", got)
	}
	if got := st.ContainerStatuses[0].Resources.Limits.Cpu().String(); got != "200m" {
		t.Errorf("running cpu limit %s, want 200m until applied", got)
	}
	if c := condition(st, corev1.PodResizeInProgress); c == nil || c.Reason != corev1.PodReasonError || !strings.Contains(c.Message, "test failure") {
		t.Errorf("a failed update: %+v, want PodResizeInProgress with reason Error", c)
	}
	run.fail = nil
	w.sync(ctx, resized, now)
	st = w.status(resized)
	if c := condition(st, corev1.PodResizeInProgress); c != nil {
		t.Errorf("applied resize still in progress: %+v", c)
	}
	if len(run.applied) != 1 || run.applied[0] != (runtime.Resources{MemoryLimit: 96 << 20, CPUMillis: 400, CPURequestMillis: 300}) {
		t.Errorf("applied %+v", run.applied)
	}
	if got := st.ContainerStatuses[0].Resources.Limits.Memory().String(); got != "96Mi" {
		t.Errorf("running memory limit %s, want 96Mi", got)
	}

	huge := resized.DeepCopy()
	huge.Generation = 3
	huge.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: resources("cpu", "3"), Limits: resources("cpu", "3")}
	w.sync(ctx, huge, now)
	st = w.status(huge)
	if c := condition(st, corev1.PodResizePending); c == nil || c.Reason != corev1.PodReasonInfeasible || c.ObservedGeneration != 3 {
		t.Errorf("a resize over the node's capacity: %+v, want PodResizePending Infeasible for generation 3", c)
	}
	if got := st.ContainerStatuses[0].AllocatedResources.Cpu().String(); got != "300m" {
		t.Errorf("allocated cpu %s after an infeasible resize, want 300m kept", got)
	}
	want := []string{ReasonResizeStarted, ReasonResizeError, ReasonResizeCompleted, ReasonResizeInfeasible}
	var got []string
	for _, r := range h.reasons() {
		if strings.HasPrefix(r, "Resize") {
			got = append(got, r)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("events %v, want %v", got, want)
	}
}

func condition(s corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

// TestAllocationSurvivesAgentRestart: a new agent takes a container's
// allocated resources from the node's record, not from the spec: a resize
// the previous agent had not allocated (too big for the node) is decided
// again, not run as if allocated.
func TestAllocationSurvivesAgentRestart(t *testing.T) {
	pod := fakePod(corev1.RestartPolicyAlways)
	pod.Generation = 1
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: resources("cpu", "100m"), Limits: resources("cpu", "100m")}
	h := newFakeHost()
	h.capacity = resources("cpu", "2", "memory", "1Gi")
	dir := t.TempDir()
	ctx, now := context.Background(), time.Now()
	w := newFakeWorker(h, &fakeRuntime{}, dir, pod, false)
	w.sync(ctx, pod, now)

	huge := pod.DeepCopy()
	huge.Generation = 2
	huge.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: resources("cpu", "3"), Limits: resources("cpu", "3")}
	w.sync(ctx, huge, now)

	w2 := newFakeWorker(h, &fakeRuntime{}, dir, huge, false)
	if got := w2.containers[0].spec.Resources.Requests.Cpu().String(); got != "100m" {
		t.Fatalf("a new agent takes cpu %s as allocated, want the 100m the previous one allocated", got)
	}
	w2.sync(ctx, huge, now)
	st := w2.status(huge)
	if c := condition(st, corev1.PodResizePending); c == nil || c.Reason != corev1.PodReasonInfeasible {
		t.Errorf("after an agent restart: %+v, want the resize still Infeasible", c)
	}
	if got := st.ContainerStatuses[0].AllocatedResources.Cpu().String(); got != "100m" {
		t.Errorf("allocated cpu %s after an agent restart, want 100m", got)
	}
}
