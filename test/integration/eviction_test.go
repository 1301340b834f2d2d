package integration

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/internal/testenv"
)

// TestEvictionUnderMemoryPressure: a node agent whose memory threshold is
// crossed (here: --eviction-hard=memory.available<1Pi, always) reports
// MemoryPressure and evicts as the kubelet does: the BestEffort pod that
// uses memory first, while a Guaranteed pod within its request still runs;
// the evicted pod is Failed with reason Evicted, a message naming memory,
// and an event. Its containers were adopted from an agent killed with -9.
func TestEvictionUnderMemoryPressure(t *testing.T) {
	ctx, cp, o, _, cs := startNode(t)
	pods := cs.CoreV1().Pods("default")
	mk := func(name string, argv []string, res corev1.ResourceList) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			RuntimeClassName: testenv.HostRoot(), NodeName: o.NodeName, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "c", Image: "local/host", Command: argv,
				Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}},
		}}
	}
	hog := mk("hog", []string{"/usr/bin/python3", "-c", "import time\nb = bytearray(50 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\ntime.sleep(3600)"}, nil)
	steady := mk("steady", []string{"sleep", "3600"}, corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("100m")})
	for _, p := range []*corev1.Pod{hog, steady} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	phase := func(name string) (corev1.PodStatus, bool) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return corev1.PodStatus{}, false
		}
		return p.Status, true
	}
	for _, name := range []string{"hog", "steady"} {
		waitFor(ctx, t, time.Minute, name+" running", func() (bool, string) {
			s, _ := phase(name)
			return s.Phase == corev1.PodRunning, string(s.Phase)
		})
	}

	// The same node, now always under its memory threshold.
	cp.Node.Args = append(cp.Node.Args, "--eviction-hard=memory.available<1Pi")
	restartNodeAgent(t, cp, syscall.SIGKILL)

	waitFor(ctx, t, 90*time.Second, "hog evicted", func() (bool, string) {
		s, _ := phase("hog")
		return s.Phase == corev1.PodFailed && s.Reason == "Evicted", fmt.Sprintf("%s %s %s", s.Phase, s.Reason, s.Message)
	})
	s, _ := phase("hog")
	if !strings.Contains(s.Message, "The node was low on resource: memory.") {
		t.Errorf("eviction message %q does not name memory", s.Message)
	}
	if st, _ := phase("steady"); st.Phase != corev1.PodRunning {
		t.Errorf("the Guaranteed pod within its request is %s when the BestEffort one is evicted; want it still Running (evicted after)", st.Phase)
	}
	waitFor(ctx, t, 30*time.Second, "MemoryPressure on the Node", func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeMemoryPressure {
				return c.Status == corev1.ConditionTrue, string(c.Status) + " " + c.Reason
			}
		}
		return false, "no MemoryPressure condition"
	})
	waitFor(ctx, t, 30*time.Second, "an Evicted event for hog", func() (bool, string) {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=hog,reason=Evicted"})
		if err != nil {
			return false, err.Error()
		}
		return len(evs.Items) > 0, fmt.Sprintf("%d events", len(evs.Items))
	})
}
