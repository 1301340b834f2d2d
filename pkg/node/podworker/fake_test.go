package podworker

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// fakeRuntime is a runtime whose runs end when the test says so: the
// worker's decisions (restart, backoff, reasons, counts) are tested without
// processes or clocks.
type fakeRuntime struct {
	mu      sync.Mutex
	runs    []*fakeRun
	failing error // Start fails with it while set
	left    map[string]*fakeRun
}

type fakeRun struct {
	*runtime.Ending
	id      string
	started time.Time
	// stopMessage is the runtime's message on the end of a stopped run.
	stopMessage string
	// onStop, when set, runs as the run is stopped.
	onStop func()
}

func (r *fakeRun) ID() string           { return "fake://" + r.id }
func (r *fakeRun) StartedAt() time.Time { return r.started }
func (r *fakeRun) Stop(time.Duration) {
	if r.onStop != nil {
		r.onStop()
	}
	r.Finish(runtime.Exit{ExitCode: 143, Signal: "SIGTERM", Message: r.stopMessage, StartedAt: r.started, FinishedAt: r.started.Add(time.Second)})
}

// Command runs argv on the host: hooks and probes of the tests use true,
// false and sh.
func (r *fakeRun) Command(argv, env []string, dir string, tty bool) *exec.Cmd {
	return exec.Command(argv[0], argv[1:]...)
}

func (f *fakeRuntime) Name() string   { return "fake" }
func (f *fakeRuntime) Isolated() bool { return false }
func (f *fakeRuntime) CreateSandbox(id, dir, _ string, _ bool) (*runtime.Sandbox, error) {
	return &runtime.Sandbox{ID: id, Dir: dir}, nil
}
func (f *fakeRuntime) RemoveSandbox(*runtime.Sandbox) error { return nil }
func (f *fakeRuntime) Start(_ context.Context, cfg *runtime.ContainerConfig) (runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing != nil {
		return nil, f.failing
	}
	r := &fakeRun{Ending: runtime.NewEnding(), id: cfg.ID, started: time.Now()}
	f.runs = append(f.runs, r)
	return r, nil
}
func (f *fakeRuntime) Adopt(cfg *runtime.ContainerConfig) (runtime.Container, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.left[cfg.ID]
	return r, ok
}

func (f *fakeRuntime) last() *fakeRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.runs) == 0 {
		return nil
	}
	return f.runs[len(f.runs)-1]
}

// runOf is the latest run of container name of the pod of UID uid-1.
func (f *fakeRuntime) runOf(name string) *fakeRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.runs) - 1; i >= 0; i-- {
		if f.runs[i].id == "uid-1_"+name {
			return f.runs[i]
		}
	}
	return nil
}

// started lists the containers of the runs started, in order.
func (f *fakeRuntime) started() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for _, r := range f.runs {
		names = append(names, strings.TrimPrefix(r.id, "uid-1_"))
	}
	return names
}

// exitOf ends the latest run of container name with code.
func (f *fakeRuntime) exitOf(t *testing.T, name string, code int32) {
	t.Helper()
	r := f.runOf(name)
	if r == nil {
		t.Fatalf("no run of %s to end", name)
	}
	r.Finish(runtime.Exit{ExitCode: code, StartedAt: r.started, FinishedAt: r.started.Add(2 * time.Second)})
}

// exit ends the latest run with code and a message, as a crash would.
func (f *fakeRuntime) exit(t *testing.T, code int32) {
	t.Helper()
	r := f.last()
	if r == nil {
		t.Fatal("no run to end")
	}
	r.Finish(runtime.Exit{Run: int32(len(f.runs) - 1), ExitCode: code, Message: "boom", StartedAt: r.started, FinishedAt: r.started.Add(2 * time.Second)})
}

func fakePod(policy corev1.RestartPolicy) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1", Annotations: map[string]string{"steadyplane.io/revision": "3"}},
		Spec: corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{{Name: "c", Command: []string{"server"}}}}}
}

// fakeHost is the node agent as a worker sees it, without an API server:
// events are kept, status writes and deletions recorded, and the local
// record is a real store.
type fakeHost struct {
	mu      sync.Mutex
	local   *localstatus.Store
	events  []string // reason: message
	patches int
	removed int
	// capacity is what the node offers (allocatable); empty for nothing.
	capacity corev1.ResourceList
}

func newFakeHost() *fakeHost { return &fakeHost{local: localstatus.NewStore()} }

func (h *fakeHost) Event(_ *corev1.Pod, _, reason, format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, reason+": "+fmt.Sprintf(format, args...))
}
func (h *fakeHost) PatchStatus(_ context.Context, pod *corev1.Pod, statusOf func(*corev1.Pod) corev1.PodStatus) ([]byte, bool, error) {
	statusOf(pod)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.patches++
	return nil, false, nil
}
func (h *fakeHost) RemovePod(context.Context, *corev1.Pod) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removed++
	return nil
}
func (h *fakeHost) Requested(types.UID) corev1.ResourceList                 { return corev1.ResourceList{} }
func (h *fakeHost) ServiceEnv(*corev1.Pod, bool) (map[string]string, error) { return nil, nil }

// node is the node of a fake host's workers: a real local record, no API,
// no images.
func (h *fakeHost) node(rt runtime.Runtime, dir string) *Node {
	return &Node{IP: "127.0.0.1", RootDir: dir, Runtime: rt, Allocatable: h.capacity, Local: h.local}
}

// reasons returns the reasons of the events recorded so far, in order.
func (h *fakeHost) reasons() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var r []string
	for _, e := range h.events {
		r = append(r, strings.SplitN(e, ":", 2)[0])
	}
	return r
}

// newFakeWorker is a worker of pod on h and rt, its status writes dropped.
func newFakeWorker(h *fakeHost, rt runtime.Runtime, dir string, pod *corev1.Pod, static bool) *Worker {
	w := newWorker(h, h.node(rt, dir), pod, static)
	w.write = func(context.Context, *corev1.Pod) {}
	return w
}

func statusOf(w *Worker, pod *corev1.Pod) corev1.ContainerStatus {
	return w.status(pod).ContainerStatuses[0]
}

// TestWorkerCrashLoop drives a crashing container through the named states
// of the kubelet (running, CrashLoopBackOff, running again) on a fake runtime
// and checks that counts survive an agent restart through the local record.
func TestWorkerCrashLoop(t *testing.T) {
	dir := t.TempDir()
	rt := &fakeRuntime{}
	pod := fakePod(corev1.RestartPolicyAlways)
	h := newFakeHost()
	w := newFakeWorker(h, rt, dir, pod, true)
	ctx := context.Background()
	now := time.Now()

	w.sync(ctx, pod, now)
	if s := statusOf(w, pod); s.State.Running == nil || s.RestartCount != 0 {
		t.Fatalf("after the first sync: %+v, want running with 0 restarts", s.State)
	}
	// The first crash restarts at once; the second waits 10s.
	rt.exit(t, 1)
	w.sync(ctx, pod, now)
	if s := statusOf(w, pod); s.State.Running == nil || s.RestartCount != 1 || s.LastTerminationState.Terminated.ExitCode != 1 {
		t.Fatalf("after the first crash: %+v, want running again, 1 restart, last exit 1", s)
	}
	rt.exit(t, 2)
	w.sync(ctx, pod, now)
	s := statusOf(w, pod)
	if s.State.Waiting == nil || s.State.Waiting.Reason != ReasonCrashLoopBackOff || s.RestartCount != 2 {
		t.Fatalf("after the second crash: %+v, want waiting CrashLoopBackOff with 2 restarts", s)
	}
	if got := s.LastTerminationState.Terminated; got.ExitCode != 2 || got.Reason != ReasonError || got.Message != "boom" {
		t.Errorf("last termination = %+v, want exit 2, reason Error, message boom", got)
	}
	w.sync(ctx, pod, now.Add(5*time.Second))
	if len(rt.runs) != 2 {
		t.Fatalf("%d runs within the backoff, want 2", len(rt.runs))
	}
	w.sync(ctx, pod, now.Add(11*time.Second))
	if len(rt.runs) != 3 {
		t.Fatalf("%d runs after the backoff, want 3", len(rt.runs))
	}

	if got, want := h.reasons(), []string{"NotIsolated", "Started", "Started", "BackOff", "Started"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}

	rec, err := localstatus.Read(w.podDir(pod))
	if err != nil || rec == nil {
		t.Fatalf("local record: %v, %v", rec, err)
	}
	if rec.StartAttempts["c"] != 3 || rec.Status.ContainerStatuses[0].RestartCount != 2 || rec.Annotations["steadyplane.io/revision"] != "3" || !rec.Static {
		t.Errorf("local record = attempts %v, restarts %d, annotations %v, static %v; want 3, 2, revision 3, static",
			rec.StartAttempts, rec.Status.ContainerStatuses[0].RestartCount, rec.Annotations, rec.Static)
	}
	if got := localstatus.PodList(h.local.List()); len(got.Items) != 1 || got.Items[0].Status.ContainerStatuses[0].RestartCount != 2 {
		t.Errorf("served /pods = %+v, want the pod with 2 restarts", got.Items)
	}

	// A new agent (no API status: a static pod with the API server down)
	// adopts the running container and continues the counts.
	rt2 := &fakeRuntime{left: map[string]*fakeRun{"uid-1_c": rt.last()}}
	h2 := newFakeHost()
	w2 := newFakeWorker(h2, rt2, dir, pod, true)
	w2.sync(ctx, pod, now.Add(12*time.Second))
	if s := statusOf(w2, pod); s.State.Running == nil || s.RestartCount != 2 || len(rt2.runs) != 0 {
		t.Fatalf("after an agent restart: %+v, %d new runs; want the adopted run, 2 restarts, no new run", s, len(rt2.runs))
	}
	if got, want := h2.reasons(), []string{"NotIsolated", "Adopted"}; !slices.Equal(got, want) {
		t.Errorf("events after an agent restart %q, want %q", got, want)
	}
	if w2.containers[0].startAttempts != 3 {
		t.Errorf("start attempts after an agent restart = %d, want 3", w2.containers[0].startAttempts)
	}
}

// TestWorkerStartFailure checks that a start that fails counts as an
// attempt, waits with RunContainerError and is retried after 10s.
func TestWorkerStartFailure(t *testing.T) {
	rt := &fakeRuntime{failing: errors.New(`exec: "server": executable file not found`)}
	pod := fakePod(corev1.RestartPolicyAlways)
	w := newFakeWorker(newFakeHost(), rt, t.TempDir(), pod, false)
	now := time.Now()
	w.sync(context.Background(), pod, now)
	s := statusOf(w, pod)
	if s.State.Waiting == nil || s.State.Waiting.Reason != ReasonRunContainerError || s.State.Waiting.Message != rt.failing.Error() {
		t.Fatalf("state = %+v, want waiting RunContainerError with the error", s.State)
	}
	w.sync(context.Background(), pod, now.Add(time.Second))
	if w.containers[0].startAttempts != 1 {
		t.Errorf("attempts within 10s = %d, want 1", w.containers[0].startAttempts)
	}
	rt.mu.Lock()
	rt.failing = nil
	rt.mu.Unlock()
	w.sync(context.Background(), pod, now.Add(11*time.Second))
	if s := statusOf(w, pod); s.State.Running == nil || w.containers[0].startAttempts != 2 || s.RestartCount != 0 {
		t.Errorf("after the retry: %+v, attempts %d; want running, 2 attempts, 0 restarts", s.State, w.containers[0].startAttempts)
	}
}

// TestWorkerFinishedForGoodSurvivesRestart checks that a RestartPolicy Never
// container that ended is not run again by a new agent that knows of it only
// from the local record.
func TestWorkerFinishedForGoodSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	rt := &fakeRuntime{}
	pod := fakePod(corev1.RestartPolicyNever)
	w := newFakeWorker(newFakeHost(), rt, dir, pod, true)
	now := time.Now()
	w.sync(context.Background(), pod, now)
	rt.exit(t, 0)
	w.sync(context.Background(), pod, now)
	if s := statusOf(w, pod); s.State.Terminated == nil || s.State.Terminated.Reason != ReasonCompleted {
		t.Fatalf("state = %+v, want terminated Completed", s.State)
	}
	rt2 := &fakeRuntime{}
	w2 := newFakeWorker(newFakeHost(), rt2, dir, pod, true)
	w2.sync(context.Background(), pod, now.Add(time.Minute))
	if len(rt2.runs) != 0 {
		t.Fatalf("a new agent ran a finished RestartPolicy Never container again")
	}
	if s := statusOf(w2, pod); s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
		t.Errorf("state after an agent restart = %+v, want terminated with exit 0", s.State)
	}
}

func TestContainerState(t *testing.T) {
	run := &fakeRun{Ending: runtime.NewEnding()}
	for _, tt := range []struct {
		name string
		c    container
		want containerState
	}{
		{"never started", container{}, stateWaiting},
		{"waiting to restart after a crash", container{lifecycle: lifecycle{phase: phaseBackingOff, waiting: &corev1.ContainerStateWaiting{Reason: ReasonCrashLoopBackOff}, last: &corev1.ContainerStateTerminated{ExitCode: 1}}}, stateWaiting},
		{"a run under way", container{lifecycle: lifecycle{phase: phaseRunning}, run: run}, stateRunning},
		{"ended for good", container{lifecycle: lifecycle{phase: phaseTerminated, done: &corev1.ContainerStateTerminated{}}}, stateTerminated},
		{"ended for good, as a previous agent reported", container{lifecycle: lifecycle{done: &corev1.ContainerStateTerminated{}}}, stateTerminated},
		{"being killed after a failed liveness probe", container{lifecycle: lifecycle{phase: phaseKilling}, run: run}, stateRunning},
	} {
		if got := tt.c.state(); got != tt.want {
			t.Errorf("%s: state %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestStoppedRunKeepsItsMessage: a run stopped with its pod shows how it
// ended with the same message as a run that exited by itself.
func TestStoppedRunKeepsItsMessage(t *testing.T) {
	rt := &fakeRuntime{}
	pod := fakePod(corev1.RestartPolicyAlways)
	w := newFakeWorker(newFakeHost(), rt, t.TempDir(), pod, false)
	w.sync(context.Background(), pod, time.Now())
	run := rt.last()
	if run == nil {
		t.Fatal("the container did not start")
	}
	run.stopMessage = "stopped by the runtime"
	w.stopAll(pod, time.Second)
	s := statusOf(w, pod)
	if s.State.Terminated == nil || s.State.Terminated.ExitCode != 143 || s.State.Terminated.Message != "stopped by the runtime" {
		t.Fatalf("after the stop: %+v, want terminated 143 with the runtime's message", s.State)
	}
}
