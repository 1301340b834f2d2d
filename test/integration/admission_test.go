package integration

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/internal/testenv"
)

// TestAdmissionRejectsHostPortConflict: a pod given to the node directly
// (no scheduler) whose host port another pod holds is rejected as the
// kubelet rejects it: Failed, reason NodePorts, "Pod was rejected: ...",
// and an event; the pod holding the port runs on.
func TestAdmissionRejectsHostPortConflict(t *testing.T) {
	ctx, _, o, _, cs := startNode(t)
	pods := cs.CoreV1().Pods("default")
	mk := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "c", Image: "local/host", Command: []string{"sleep", "3600"},
				Ports: []corev1.ContainerPort{{ContainerPort: 21017, HostPort: 21017}}}},
		}}
	}
	if _, err := pods.Create(ctx, mk("holder"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, time.Minute, "holder running", func() (bool, string) {
		p, err := pods.Get(ctx, "holder", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})
	if _, err := pods.Create(ctx, mk("second"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 30*time.Second, "second rejected", func() (bool, string) {
		p, err := pods.Get(ctx, "second", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "NodePorts" && strings.HasPrefix(p.Status.Message, "Pod was rejected: "),
			string(p.Status.Phase) + " " + p.Status.Reason + " " + p.Status.Message
	})
	if p, err := pods.Get(ctx, "holder", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Errorf("the pod holding the port: %v %v, want it Running", p.Status.Phase, err)
	}
	waitFor(ctx, t, 30*time.Second, "a NodePorts event", func() (bool, string) {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=second,reason=NodePorts"})
		if err != nil {
			return false, err.Error()
		}
		return len(evs.Items) == 1, ""
	})
}
