package agent

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// rankPod is a pod with a memory request (none for "") and a priority.
func rankPod(name, memRequest string, priority int32) *corev1.Pod {
	c := corev1.Container{Name: "c"}
	if memRequest != "" {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memRequest)}
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Priority: ptr.To(priority), Containers: []corev1.Container{c}}}
}

// TestRankForEviction: the kubelet's order under memory pressure (over
// requests first, then lower priority, then most above the request) and
// under PID pressure (lower priority, then most processes).
func TestRankForEviction(t *testing.T) {
	const mi = 1 << 20
	tests := []struct {
		name string
		res  corev1.ResourceName
		in   []podUsage
		want []string
	}{
		{"BestEffort using memory goes before a pod within its request, whatever their sizes",
			corev1.ResourceMemory,
			[]podUsage{{pod: rankPod("guaranteed-big", "1Gi", 0), used: 900 * mi, known: true}, {pod: rankPod("besteffort-small", "", 0), used: 5 * mi, known: true}},
			[]string{"besteffort-small", "guaranteed-big"}},
		{"among pods over their requests, lower priority first",
			corev1.ResourceMemory,
			[]podUsage{{pod: rankPod("important", "", 1000), used: 500 * mi, known: true}, {pod: rankPod("batch", "", 0), used: 10 * mi, known: true}},
			[]string{"batch", "important"}},
		{"same priority: most above the request first",
			corev1.ResourceMemory,
			[]podUsage{{pod: rankPod("a", "100Mi", 0), used: 150 * mi, known: true}, {pod: rankPod("b", "10Mi", 0), used: 110 * mi, known: true}, {pod: rankPod("c", "", 0), used: 120 * mi, known: true}},
			[]string{"c", "b", "a"}},
		{"a pod that could not be measured goes first",
			corev1.ResourceMemory,
			[]podUsage{{pod: rankPod("measured", "", 0), used: 500 * mi, known: true}, {pod: rankPod("unknown", "", 0)}},
			[]string{"unknown", "measured"}},
		{"within their requests, lower priority first, then most used",
			corev1.ResourceMemory,
			[]podUsage{{pod: rankPod("hi", "1Gi", 10), used: 10 * mi, known: true}, {pod: rankPod("lo-small", "1Gi", 0), used: 10 * mi, known: true}, {pod: rankPod("lo-big", "1Gi", 0), used: 500 * mi, known: true}},
			[]string{"lo-big", "lo-small", "hi"}},
		{"PID pressure: priority, then processes (requests do not count)",
			"pids",
			[]podUsage{{pod: rankPod("few", "", 0), used: 3, known: true}, {pod: rankPod("forks", "1Gi", 0), used: 900, known: true}, {pod: rankPod("vip", "", 100), used: 5000, known: true}},
			[]string{"forks", "few", "vip"}},
	}
	for _, tc := range tests {
		pods := slices.Clone(tc.in)
		rankForEviction(pods, tc.res)
		var got []string
		for _, p := range pods {
			got = append(got, p.pod.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestEvictable(t *testing.T) {
	critical := rankPod("dns", "", 2000000000)
	critical.Spec.PriorityClassName = "system-cluster-critical"
	mirror := rankPod("etcd", "", 0)
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want bool
	}{{rankPod("web", "", 0), true}, {critical, false}, {mirror, false}} {
		if got := evictable(tc.pod); got != tc.want {
			t.Errorf("%s: evictable %v, want %v", tc.pod.Name, got, tc.want)
		}
	}
	// A pod of the API that claims to come from a file, as only a static
	// pod may: read from the API, it is evictable all the same, and the
	// informer's object is left as it was.
	claims := rankPod("claims-static", "", 0)
	claims.Annotations = map[string]string{staticpod.SourceAnnotation: "file"}
	static := rankPod("static", "", 0)
	static.Annotations = map[string]string{staticpod.SourceAnnotation: "file"}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want bool
	}{{fromAPI(claims), true}, {fromAPI(rankPod("plain", "", 0)), true}, {static, false}} {
		if got := evictable(tc.pod); got != tc.want {
			t.Errorf("%s: evictable %v, want %v", tc.pod.Name, got, tc.want)
		}
	}
}

func TestFromAPILeavesTheInformersPodAlone(t *testing.T) {
	claims := rankPod("claims-static", "", 0)
	claims.Annotations = map[string]string{staticpod.SourceAnnotation: "file"}
	if got := fromAPI(claims); got == claims || got.Annotations[staticpod.SourceAnnotation] != "api" || claims.Annotations[staticpod.SourceAnnotation] != "file" {
		t.Errorf("fromAPI: %v (the informer's: %v); want a copy marked api", got.Annotations, claims.Annotations)
	}
}

func TestEvictionMessage(t *testing.T) {
	msg := evictionMessage(crossing{threshold: 100 << 20, available: 50 << 20}, corev1.ResourceMemory,
		podUsage{pod: rankPod("web", "64Mi", 0), used: 300 << 20, known: true})
	for _, want := range []string{"The node was low on resource: memory.", "Threshold quantity: 100Mi, available: 50Mi.", "Pod web was using 300Mi, request is 64Mi."} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}
