package podworker

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// TestStorageViolation: the kubelet's local storage evictions, with its
// messages.
func TestStorageViolation(t *testing.T) {
	limit := resource.MustParse("10Mi")
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}}}},
	}}
	tests := []struct {
		name  string
		usage storageUsage
		want  string
	}{
		{"within every limit", storageUsage{emptyDirs: map[string]int64{"cache": 10 << 20, "scratch": 5 << 30}, containers: map[string]int64{"c": 1 << 30}}, ""},
		{"an emptyDir over its sizeLimit", storageUsage{emptyDirs: map[string]int64{"cache": 10<<20 + 1}}, `Usage of EmptyDir volume "cache" exceeds the limit "10Mi". `},
		{"an emptyDir without a sizeLimit is never over", storageUsage{emptyDirs: map[string]int64{"scratch": 1 << 40}}, ""},
		{"a container over its ephemeral-storage limit", storageUsage{containers: map[string]int64{"c": 1<<30 + 1}}, `Container c exceeded its local ephemeral storage limit "1Gi". `},
		{"nothing measured", storageUsage{}, ""},
	}
	for _, tc := range tests {
		if got := storageViolation(pod, tc.usage); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPastActiveDeadline(t *testing.T) {
	start := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	pod := func(d *int64) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{ActiveDeadlineSeconds: d}} }
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		start time.Time
		after time.Duration
		want  bool
	}{
		{"no deadline", pod(nil), start, time.Hour, false},
		{"before it", pod(ptr.To[int64](5)), start, 4 * time.Second, false},
		{"at it", pod(ptr.To[int64](5)), start, 5 * time.Second, true},
		{"not started", pod(ptr.To[int64](5)), time.Time{}, time.Hour, false},
	} {
		if got := pastActiveDeadline(tc.pod, tc.start, start.Add(tc.after)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// deadlineWorker is a fake worker of a pod with a 5 s activeDeadlineSeconds.
func deadlineWorker(t *testing.T, policy corev1.RestartPolicy) (*corev1.Pod, *fakeRuntime, *Worker) {
	pod := fakePod(policy)
	pod.Spec.ActiveDeadlineSeconds = ptr.To[int64](5)
	rt := &fakeRuntime{}
	return pod, rt, newFakeWorker(newFakeHost(), rt, t.TempDir(), pod, false)
}

// TestWorkerActiveDeadline: a pod past its activeDeadlineSeconds is
// stopped for good, Failed with the kubelet's reason and message.
func TestWorkerActiveDeadline(t *testing.T) {
	pod, rt, w := deadlineWorker(t, corev1.RestartPolicyAlways)
	ctx, now := context.Background(), time.Now()
	w.sync(ctx, pod, now)
	if rt.last() == nil {
		t.Fatal("nothing started")
	}
	w.turn(ctx, pod, podEvent{kind: podSync}, now.Add(6*time.Second))
	st := w.status(pod)
	if st.Phase != corev1.PodFailed || st.Reason != ReasonDeadlineExceeded || st.Message != messageDeadlineExceeded {
		t.Errorf("status %s %s %q, want Failed DeadlineExceeded", st.Phase, st.Reason, st.Message)
	}
	select {
	case <-rt.last().Done():
	default:
		t.Error("the container still runs past the deadline")
	}
}

// TestActiveDeadlineAfterTheEnd: a pod that completed before its deadline
// stays Succeeded when the deadline passes.
func TestActiveDeadlineAfterTheEnd(t *testing.T) {
	pod, rt, w := deadlineWorker(t, corev1.RestartPolicyNever)
	ctx, now := context.Background(), time.Now()
	w.sync(ctx, pod, now)
	rt.exit(t, 0)
	w.sync(ctx, pod, now.Add(time.Second))
	w.sync(ctx, pod, now.Add(time.Minute))
	if st := w.status(pod); st.Phase != corev1.PodSucceeded || st.Reason != "" {
		t.Errorf("a pod that completed in time: %s %s, want Succeeded", st.Phase, st.Reason)
	}
}
