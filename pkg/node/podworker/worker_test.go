package podworker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/process"
)

func TestFinishedForGood(t *testing.T) {
	terminated := func(code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	tests := []struct {
		name   string
		policy corev1.RestartPolicy
		status corev1.ContainerStatus
		init   bool
		want   bool
	}{
		{"Never, succeeded", corev1.RestartPolicyNever, terminated(0), false, true},
		{"Never, killed at the agent's shutdown (143)", corev1.RestartPolicyNever, terminated(143), false, true},
		{"OnFailure, succeeded", corev1.RestartPolicyOnFailure, terminated(0), false, true},
		{"OnFailure, failed: runs again", corev1.RestartPolicyOnFailure, terminated(1), false, false},
		{"Always: runs again", corev1.RestartPolicyAlways, terminated(0), false, false},
		{"running: the agent decides", corev1.RestartPolicyNever, running, false, false},
		{"no status yet", corev1.RestartPolicyNever, corev1.ContainerStatus{}, false, false},
		{"init container that completed, Always", corev1.RestartPolicyAlways, terminated(0), true, true},
		{"init container that failed, Always: runs again", corev1.RestartPolicyAlways, terminated(1), true, false},
		{"init container that failed, Never", corev1.RestartPolicyNever, terminated(1), true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: tt.policy}}
			if got := finishedForGood(pod, tt.status, tt.init) != nil; got != tt.want {
				t.Errorf("finishedForGood = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRemoveUntilGone(t *testing.T) {
	fast := wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1000}
	ref := klog.KRef("ns", "p")
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p")
	for _, tt := range []struct {
		name  string
		errs  []error
		calls int
	}{
		{"removed at once", []error{nil}, 1},
		{"already gone", []error{gone}, 1},
		{"another pod of that name (UID precondition)", []error{apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("uid"))}, 1},
		{"API server down three times, then removed", []error{errors.New("connection refused"), errors.New("connection refused"), apierrors.NewServiceUnavailable("x"), nil}, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			removeUntilGone(context.Background(), ref, fast, func(context.Context) error {
				err := tt.errs[min(calls, len(tt.errs)-1)]
				calls++
				return err
			})
			if calls != tt.calls {
				t.Errorf("%d calls, want %d", calls, tt.calls)
			}
		})
	}
	t.Run("the agent stopping ends the retries", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		removeUntilGone(ctx, ref, fast, func(context.Context) error { return errors.New("down") })
		if time.Since(start) > 5*time.Second {
			t.Errorf("kept retrying for %v after the context ended", time.Since(start))
		}
	})
}

func TestStatusDetails(t *testing.T) {
	w := &Worker{node: &Node{IP: "127.0.0.1"}}
	done := &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}
	failed := &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
	terminated := func(init bool, term *corev1.ContainerStateTerminated) *container {
		return &container{lifecycle: lifecycle{phase: phaseTerminated, init: init, done: term}}
	}
	if s := w.containerStatus(terminated(true, done)); !s.Ready {
		t.Error("a completed init container is not ready")
	}
	if s := w.containerStatus(terminated(true, failed)); s.Ready {
		t.Error("a failed init container is ready")
	}
	if s := w.containerStatus(terminated(false, done)); s.Ready {
		t.Error("a finished regular container is ready")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 7}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	w.containers = []*container{{spec: pod.Spec.Containers[0]}}
	s := w.status(pod)
	if s.ObservedGeneration != 7 {
		t.Errorf("status.observedGeneration = %d, want 7", s.ObservedGeneration)
	}
	for _, c := range s.Conditions {
		if c.ObservedGeneration != 7 {
			t.Errorf("condition %s observedGeneration = %d, want 7", c.Type, c.ObservedGeneration)
		}
	}
}

// TestWorkerUnderProbes runs a worker with real processes and probes, its
// status writes recorded instead of sent: under -race it checks that probe
// goroutines and the worker share trackers only under the lock, and that a
// liveness kill restarts the container without holding the worker.
func TestWorkerUnderProbes(t *testing.T) {
	dir := t.TempDir()
	kill := filepath.Join(dir, "kill-me")
	grace := int64(5)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{
			Name: "c", Command: []string{"sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1},
			// A startup probe makes the other probes' goroutines read its
			// tracker, which the worker replaces when the container restarts.
			StartupProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "test ! -f " + kill}}}, PeriodSeconds: 1, FailureThreshold: 1},
		}},
	}}
	h := newFakeHost()
	n := h.node(process.Runtime{}, dir)
	n.StopPodsOnExit = true
	w := newWorker(h, n, pod, false)
	var mu sync.Mutex
	var statuses []corev1.PodStatus
	w.write = func(_ context.Context, p *corev1.Pod) {
		s := w.status(p)
		mu.Lock()
		statuses = append(statuses, s)
		mu.Unlock()
	}
	seen := func(cond func(corev1.ContainerStatus) bool) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range statuses {
			if len(s.ContainerStatuses) == 1 && cond(s.ContainerStatuses[0]) {
				return true
			}
		}
		return false
	}
	waitUntil := func(what string, timeout time.Duration, cond func(corev1.ContainerStatus) bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !seen(cond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() {
		cancel()
		<-done
	}()
	waitUntil("Ready", 15*time.Second, func(s corev1.ContainerStatus) bool { return s.Ready })
	if err := os.WriteFile(kill, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The container ignores SIGTERM: it dies by SIGKILL after its 5s grace
	// period and runs again.
	waitUntil("a restart after the liveness kill", 20*time.Second, func(s corev1.ContainerStatus) bool {
		return s.RestartCount == 1 && s.LastTerminationState.Terminated != nil && s.LastTerminationState.Terminated.ExitCode == 137
	})
}

// TestStatusWriteEndsWithThePod: a status write to an API server that holds
// it (one that is not ready answers 503 with Retry-After, and client-go
// retries for up to ~50s) gives up as soon as the pod retires, so that a
// static pod's new manifest replaces it at once. The agent's own write
// ends with its context (agent.TestPatchStatusEndsWithItsContext).
func TestStatusWriteEndsWithThePod(t *testing.T) {
	held := make(chan struct{}, 1)
	h := &holdingHost{fakeHost: newFakeHost(), held: held}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	w := newWorker(h, h.node(&fakeRuntime{}, t.TempDir()), pod, false)
	done := make(chan struct{})
	go func() { w.writeStatus(context.Background(), pod); close(done) }()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the status write never reached the server")
	}
	start := time.Now()
	w.Retire()
	select {
	case <-done:
		t.Logf("the write gave up %v after the pod retired", time.Since(start).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("a status write in flight held up the pod's retirement for 3s")
	}
}

// holdingHost holds every status write until its context ends, as an API
// server that is not ready does with client-go's retries.
type holdingHost struct {
	*fakeHost
	held chan struct{}
}

func (h *holdingHost) PatchStatus(ctx context.Context, _ *corev1.Pod, _ func(*corev1.Pod) corev1.PodStatus) ([]byte, bool, error) {
	h.held <- struct{}{}
	<-ctx.Done()
	return nil, false, ctx.Err()
}

// TestAdoptedRunKeepsItsReadiness: a new agent adopting a running
// container with a readiness probe keeps the verdict the previous agent
// reported for that very run, so that the pod stays Ready while the probe
// has not run again; a status of another run gives nothing.
func TestAdoptedRunKeepsItsReadiness(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	probe := &corev1.Probe{InitialDelaySeconds: 3600, ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	left := &fakeRun{Ending: runtime.NewEnding(), id: "uid-1_c", started: time.Now()}
	tests := []struct {
		name      string
		statusID  string
		ready     bool
		wantReady bool
	}{
		{"the previous agent reported this run ready", left.ID(), true, true},
		{"the previous agent reported this run not ready", left.ID(), false, false},
		{"the status is of another run", "fake://older", true, false},
	}
	for _, tc := range tests {
		pod := fakePod(corev1.RestartPolicyAlways)
		pod.Spec.Containers[0].ReadinessProbe = probe
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", ContainerID: tc.statusID, Ready: tc.ready, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		rt := &fakeRuntime{left: map[string]*fakeRun{"uid-1_c": left}}
		w := newFakeWorker(newFakeHost(), rt, t.TempDir(), pod, false)
		w.sync(ctx, pod, time.Now())
		s := statusOf(w, pod)
		if s.State.Running == nil || len(rt.runs) != 0 {
			t.Fatalf("%s: %+v with %d new runs; want the adopted run", tc.name, s.State, len(rt.runs))
		}
		if s.Ready != tc.wantReady {
			t.Errorf("%s: ready %v, want %v", tc.name, s.Ready, tc.wantReady)
		}
		w.stopProbes(w.containers[0])
	}
}
