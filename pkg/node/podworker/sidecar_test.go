package podworker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// sidecarTestPod has init container "i", sidecar "s" and regular container
// "c", under restart policy Never.
func sidecarTestPod() *corev1.Pod {
	pod := fakePod(corev1.RestartPolicyNever)
	pod.Spec.InitContainers = []corev1.Container{{Name: "i", Command: []string{"setup"}},
		{Name: "s", Command: []string{"proxy"}, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	return pod
}

// conditionStatus is the status of s's condition t, "" without one.
func conditionStatus(s corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
	if c := condition(s, t); c != nil {
		return c.Status
	}
	return ""
}

// TestWorkerSidecars drives a pod with a sidecar as the kubelet runs one: the
// sidecar starts after the init container before it succeeded and before the
// regular container; it restarts under a pod restart policy of Never; once the
// regular container ended for good it is stopped and the pod succeeds; and an
// agent restart does not run it again.
func TestWorkerSidecars(t *testing.T) {
	dir := t.TempDir()
	rt := &fakeRuntime{}
	pod := sidecarTestPod()
	w := newFakeWorker(newFakeHost(), rt, dir, pod, true)
	ctx, now := context.Background(), time.Now()

	w.sync(ctx, pod, now)
	if got := rt.started(); !slices.Equal(got, []string{"i"}) {
		t.Fatalf("first sync started %v, want the init container alone", got)
	}
	if s := w.status(pod); s.Phase != corev1.PodPending || conditionStatus(s, corev1.PodInitialized) != corev1.ConditionFalse {
		t.Fatalf("while initializing: phase %s, Initialized %s", s.Phase, conditionStatus(s, corev1.PodInitialized))
	}
	rt.exitOf(t, "i", 0)
	w.sync(ctx, pod, now)
	if got := rt.started(); !slices.Equal(got, []string{"i", "s", "c"}) {
		t.Fatalf("after the init container: started %v, want the sidecar then the container", got)
	}
	s := w.status(pod)
	if s.Phase != corev1.PodRunning || conditionStatus(s, corev1.PodInitialized) != corev1.ConditionTrue || conditionStatus(s, corev1.ContainersReady) != corev1.ConditionTrue {
		t.Fatalf("running: phase %s, conditions %+v", s.Phase, s.Conditions)
	}
	if sc := s.InitContainerStatuses[1]; sc.State.Running == nil || !sc.Ready || sc.Started == nil || !*sc.Started {
		t.Fatalf("the sidecar's status %+v, want running, started and ready", sc)
	}

	// A sidecar that exits, even with 0 under Never, runs again.
	rt.exitOf(t, "s", 0)
	w.sync(ctx, pod, now)
	if got := rt.started(); len(got) != 4 || got[3] != "s" {
		t.Fatalf("after the sidecar exited: started %v, want it again", got)
	}
	if s := w.status(pod); s.Phase != corev1.PodRunning || s.InitContainerStatuses[1].RestartCount != 1 {
		t.Fatalf("after the sidecar's restart: phase %s, restarts %d", s.Phase, s.InitContainerStatuses[1].RestartCount)
	}

	// The regular container ends: the sidecar is stopped, the pod succeeds.
	rt.exitOf(t, "c", 0)
	w.sync(ctx, pod, now)
	s = w.status(pod)
	if s.Phase != corev1.PodSucceeded || s.InitContainerStatuses[1].State.Terminated == nil {
		t.Fatalf("after the container ended: phase %s, sidecar %+v; want Succeeded with the sidecar stopped", s.Phase, s.InitContainerStatuses[1].State)
	}
	w.sync(ctx, pod, now.Add(time.Minute))
	if n := len(rt.started()); n != 4 {
		t.Fatalf("%d runs after the pod ended, want 4: the sidecar ran again", n)
	}

	// A new agent keeps the pod as it ended.
	rt2 := &fakeRuntime{}
	w2 := newFakeWorker(newFakeHost(), rt2, dir, pod, true)
	w2.sync(ctx, pod, now.Add(2*time.Minute))
	if got := rt2.started(); len(got) != 0 {
		t.Fatalf("a new agent started %v for a pod that ended", got)
	}
	if s := w2.status(pod); s.Phase != corev1.PodSucceeded {
		t.Fatalf("after an agent restart: phase %s, want Succeeded", s.Phase)
	}
}

// TestStopTurns: on the pod's end, sidecars stop after the regular
// containers and after the sidecars that follow them, as the kubelet's
// termination ordering.
func TestStopTurns(t *testing.T) {
	cs := []*container{
		{lifecycle: lifecycle{name: "i", init: true}},
		{lifecycle: lifecycle{name: "s1", init: true, sidecar: true}},
		{lifecycle: lifecycle{name: "s2", init: true, sidecar: true}},
		{lifecycle: lifecycle{name: "a"}},
		{lifecycle: lifecycle{name: "b"}},
		{lifecycle: lifecycle{name: "debug", ephemeral: true}},
	}
	want := [][]int{nil, {2, 3, 4}, {3, 4}, nil, nil, nil}
	got := stopTurns(cs)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("%s waits for %v, want %v", cs[i].name, got[i], want[i])
		}
	}
}

// TestWorkerHooks: a postStart hook that fails is an event and stops the
// run, which restarts under the pod's policy; a preStop hook runs before the
// run is stopped and a failed one is an event.
func TestWorkerHooks(t *testing.T) {
	dir := t.TempDir()
	rt := &fakeRuntime{}
	pod := fakePod(corev1.RestartPolicyAlways)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{
		PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"false"}}},
		PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "exit 3"}}},
	}
	h := newFakeHost()
	w := newFakeWorker(h, rt, dir, pod, true)
	ctx, now := context.Background(), time.Now()
	w.sync(ctx, pod, now)
	if got := h.reasons(); !slices.Contains(got, "FailedPostStartHook") || !slices.Contains(got, "FailedPreStopHook") {
		t.Fatalf("events %v, want FailedPostStartHook and FailedPreStopHook (the stop after it ran the preStop hook)", got)
	}
	s := statusOf(w, pod)
	if s.RestartCount != 1 || s.LastTerminationState.Terminated == nil {
		t.Fatalf("after a failed postStart hook: %+v, want the run ended and restarted", s)
	}

	// The hooks pass: the run goes on, and its stop runs the preStop hook
	// first.
	marker := filepath.Join(t.TempDir(), "prestop")
	pod = pod.DeepCopy()
	pod.Spec.Containers[0].Lifecycle.PostStart.Exec.Command = []string{"true"}
	pod.Spec.Containers[0].Lifecycle.PreStop.Exec.Command = []string{"sh", "-c", "sleep 0.2; touch " + marker}
	rt2 := &fakeRuntime{}
	w2 := newFakeWorker(newFakeHost(), rt2, t.TempDir(), pod, true)
	w2.sync(ctx, pod, now)
	if s := statusOf(w2, pod); s.State.Running == nil {
		t.Fatalf("with hooks that pass: %+v, want running", s.State)
	}
	hooked := false
	rt2.last().onStop = func() { _, err := os.Stat(marker); hooked = err == nil }
	start := time.Now()
	w2.stopAll(pod, 5*time.Second)
	if s := statusOf(w2, pod); s.State.Terminated == nil || time.Since(start) > 4*time.Second {
		t.Fatalf("stopped after %v: %+v", time.Since(start), s.State)
	}
	if !hooked {
		t.Error("the run was stopped before its preStop hook had run")
	}
}

// TestPostStartEndsWithDeletion: a postStart hook that does not end is cut
// short when the pod is deleted with a grace period, so that the deletion
// goes on.
func TestPostStartEndsWithDeletion(t *testing.T) {
	pod := fakePod(corev1.RestartPolicyAlways)
	pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "30"}}}}
	h := newFakeHost()
	w := newFakeWorker(h, &fakeRuntime{}, t.TempDir(), pod, true)
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	timer := time.AfterFunc(300*time.Millisecond, func() { w.Update(deleting) })
	defer timer.Stop()
	start := time.Now()
	w.sync(context.Background(), pod, start)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("sync held %v by a postStart hook of a pod being deleted", d)
	}
	if slices.Contains(h.reasons(), "FailedPostStartHook") {
		t.Error("a hook cut by the deletion was reported as failed")
	}
}

// TestSidecarsEndWithFailedInit: a sidecar before an init container that
// fails for good (restartPolicy Never) is stopped and not run again; the
// pod is Failed.
func TestSidecarsEndWithFailedInit(t *testing.T) {
	pod := fakePod(corev1.RestartPolicyNever)
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "s", Command: []string{"proxy"}, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
		{Name: "i", Command: []string{"setup"}},
	}
	rt := &fakeRuntime{}
	w := newFakeWorker(newFakeHost(), rt, t.TempDir(), pod, true)
	ctx, now := context.Background(), time.Now()
	w.sync(ctx, pod, now)
	if got := rt.started(); !slices.Equal(got, []string{"s", "i"}) {
		t.Fatalf("started %v, want the sidecar then the init container", got)
	}
	rt.exitOf(t, "i", 1)
	w.sync(ctx, pod, now)
	w.sync(ctx, pod, now.Add(time.Minute))
	s := w.status(pod)
	if s.Phase != corev1.PodFailed || s.InitContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("after the init container failed: phase %s, sidecar %+v; want Failed with the sidecar stopped", s.Phase, s.InitContainerStatuses[0].State)
	}
	if got := rt.started(); len(got) != 2 {
		t.Errorf("started %v after the pod failed, want nothing more", got)
	}
}
