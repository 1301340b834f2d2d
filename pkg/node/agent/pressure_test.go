package agent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// TestPressureConditions: the kubelet's conditions against its default hard
// eviction thresholds.
func TestPressureConditions(t *testing.T) {
	ok := nodeStats{memoryAvailable: 1 << 30, nodefs: images.DiskUsage{Total: 100, Used: 50}, imagefs: images.DiskUsage{Total: 100, Used: 50}, pidsUsed: 100, pidMax: 4194304}
	tests := []struct {
		name   string
		change func(*nodeStats)
		want   map[corev1.NodeConditionType]corev1.ConditionStatus
	}{
		{"plenty of everything", func(*nodeStats) {}, map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeMemoryPressure: corev1.ConditionFalse, corev1.NodeDiskPressure: corev1.ConditionFalse, corev1.NodePIDPressure: corev1.ConditionFalse}},
		{"under 100Mi of memory", func(s *nodeStats) { s.memoryAvailable = 99 << 20 }, map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeMemoryPressure: corev1.ConditionTrue}},
		{"memory unknown is no pressure", func(s *nodeStats) { s.memoryAvailable = -1 }, map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeMemoryPressure: corev1.ConditionFalse}},
		{"nodefs under 10% free", func(s *nodeStats) { s.nodefs.Used = 91 }, map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeDiskPressure: corev1.ConditionTrue}},
		{"imagefs under 15% free", func(s *nodeStats) { s.imagefs.Used = 86 }, map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeDiskPressure: corev1.ConditionTrue}},
		{"imagefs at 14% used is fine", func(s *nodeStats) { s.imagefs.Used = 84 }, map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeDiskPressure: corev1.ConditionFalse}},
		{"processes within 5% of pid_max", func(s *nodeStats) { s.pidMax, s.pidsUsed = 1000, 960 }, map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodePIDPressure: corev1.ConditionTrue}},
	}
	for _, tc := range tests {
		st := ok
		tc.change(&st)
		got := map[corev1.NodeConditionType]corev1.ConditionStatus{}
		for _, c := range pressureConditions(st) {
			got[c.Type] = c.Status
			if c.Reason == "" || c.Message == "" {
				t.Errorf("%s: %s has no reason or message", tc.name, c.Type)
			}
		}
		for typ, want := range tc.want {
			if got[typ] != want {
				t.Errorf("%s: %s = %s, want %s", tc.name, typ, got[typ], want)
			}
		}
	}
}

func TestWithTransitions(t *testing.T) {
	then, now := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0))
	old := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: then},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, LastTransitionTime: then}}
	got := withTransitions([]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}, {Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue}}, old, now)
	if !got[0].LastTransitionTime.Equal(&then) || !got[1].LastTransitionTime.Equal(&now) || !got[0].LastHeartbeatTime.Equal(&now) {
		t.Errorf("transitions %+v", got)
	}
}
