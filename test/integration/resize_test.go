package integration

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/internal/testenv"
)

// TestInPlaceResize resizes a running pod through the resize subresource,
// as kubectl patch --subresource resize does: the container that may be
// resized in place reads its new memory limit from its own cgroup without
// a restart, the one whose memory policy is RestartContainer restarts once
// with it, the status shows the new resources with no resize condition
// left, and events say it started and completed. A resize that other pods
// leave no room for is Deferred, changes nothing, and is applied once they
// end. (One larger than the node the API server refuses itself.)
func TestInPlaceResize(t *testing.T) {
	ctx, _, o, _, cs := startNode(t)
	pods := cs.CoreV1().Pods("default")
	// Prints its memory limit as the container sees it, twice a second.
	watch := `while :; do cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; sleep 0.5; done`
	res := func(cpu, mem string) corev1.ResourceRequirements {
		l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
		return corev1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "resized"}, Spec: corev1.PodSpec{
		RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers: []corev1.Container{
			{Name: "inplace", Image: "local/host", Command: []string{"sh", "-c", watch}, Resources: res("100m", "64Mi")},
			{Name: "restarts", Image: "local/host", Command: []string{"sh", "-c", watch}, Resources: res("100m", "64Mi"),
				ResizePolicy: []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}},
		},
	}}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	get := func() *corev1.Pod {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	waitFor(ctx, t, time.Minute, "pod running", func() (bool, string) {
		p := get()
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})

	p := get()
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].Resources = res("150m", "96Mi")
	}
	if _, err := pods.UpdateResize(ctx, pod.Name, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, time.Minute, "resize applied", func() (bool, string) {
		p := get()
		if p.Status.ObservedGeneration < p.Generation {
			return false, fmt.Sprintf("observed generation %d of %d", p.Status.ObservedGeneration, p.Generation)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress {
				return false, fmt.Sprintf("%s %s %s", c.Type, c.Reason, c.Message)
			}
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Resources == nil || s.Resources.Limits.Memory().String() != "96Mi" || s.AllocatedResources.Cpu().String() != "150m" || s.State.Running == nil {
				return false, fmt.Sprintf("%s: %+v allocated %v", s.Name, s.Resources, s.AllocatedResources)
			}
		}
		return true, ""
	})
	for _, s := range get().Status.ContainerStatuses {
		want := map[string]int32{"inplace": 0, "restarts": 1}[s.Name]
		if s.RestartCount != want {
			t.Errorf("%s restarted %d times for a memory resize, want %d", s.Name, s.RestartCount, want)
		}
	}
	waitFor(ctx, t, 30*time.Second, "the in-place container sees its new limit", func() (bool, string) {
		last := lastLogLine(ctx, t, cs, pod.Name, "inplace")
		return last == fmt.Sprint(96<<20), last
	})

	// A resize that the node could hold but other pods leave no room for
	// waits, Deferred, and goes on once they end.
	node, err := cs.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	room := node.Status.Allocatable.Cpu().MilliValue()
	hog := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hog"}, Spec: corev1.PodSpec{
		RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []corev1.Container{{Name: "c", Image: "local/host", Command: []string{"sleep", "3600"},
			Resources: res(fmt.Sprintf("%dm", room-500), "16Mi")}},
	}}
	if _, err := pods.Create(ctx, hog, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p = get()
	p.Spec.Containers[0].Resources = res("600m", "96Mi")
	if _, err := pods.UpdateResize(ctx, pod.Name, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 30*time.Second, "a deferred resize", func() (bool, string) {
		p := get()
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodResizePending {
				return c.Reason == corev1.PodReasonDeferred && c.ObservedGeneration == p.Generation, c.Reason + " " + c.Message
			}
		}
		return false, "no PodResizePending condition"
	})
	if got := get().Status.ContainerStatuses[0].AllocatedResources.Cpu().String(); got != "150m" {
		t.Errorf("allocated cpu %s while the resize is deferred, want 150m kept", got)
	}
	if err := pods.Delete(ctx, hog.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, time.Minute, "the deferred resize applied once the other pod went", func() (bool, string) {
		p := get()
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress {
				return false, fmt.Sprintf("%s %s %s", c.Type, c.Reason, c.Message)
			}
		}
		s := p.Status.ContainerStatuses[0]
		return s.Resources != nil && s.Resources.Limits.Cpu().String() == "600m", fmt.Sprintf("%+v", s.Resources)
	})
	evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		seen[e.Reason] = true
	}
	for _, r := range []string{"ResizeStarted", "ResizeCompleted", "ResizeDeferred"} {
		if !seen[r] {
			t.Errorf("no %s event (have %v)", r, seen)
		}
	}
}

// lastLogLine is the last line container c of pod name has written.
func lastLogLine(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, c string) string {
	t.Helper()
	b, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{Container: c, TailLines: ptr.To[int64](1)}).DoRaw(ctx)
	if err != nil {
		return err.Error()
	}
	last := ""
	for sc := bufio.NewScanner(strings.NewReader(string(b))); sc.Scan(); {
		last = sc.Text()
	}
	return last
}
