package agent

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"

	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// TestPressureConditions: the kubelet's conditions against its default hard
// eviction thresholds.
func TestPressureConditions(t *testing.T) {
	defaults, err := ParseEvictionHard(DefaultEvictionHard)
	if err != nil {
		t.Fatal(err)
	}
	ok := nodeStats{memoryAvailable: 1 << 30, memoryTotal: 8 << 30, nodefs: images.DiskUsage{Total: 100, Used: 50}, imagefs: images.DiskUsage{Total: 100, Used: 50}, pidsUsed: 100, pidMax: 4194304}
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
		for _, c := range pressureConditions(st, defaults) {
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

func TestParseEvictionHard(t *testing.T) {
	tests := []struct {
		in     map[string]string
		errHas string
	}{
		{in: DefaultEvictionHard},
		{in: map[string]string{"memory.available": "1Gi", "pid.available": "10%"}},
		{in: map[string]string{"nodefs.inodesFree": "5%"}, errHas: "does not measure nodefs.inodesFree"},
		{in: map[string]string{"memory.available": "lots"}, errHas: "--eviction-hard"},
		{in: map[string]string{"memory.used": "1Gi"}, errHas: "--eviction-hard"},
	}
	for _, tc := range tests {
		_, err := ParseEvictionHard(tc.in)
		if (err != nil) != (tc.errHas != "") || err != nil && !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%v: %v; want an error containing %q", tc.in, err, tc.errHas)
		}
	}
}

// TestCrossedThresholds: quantities and percentages of capacity, in the
// kubelet's order of eviction priority (memory first).
func TestCrossedThresholds(t *testing.T) {
	ths, err := ParseEvictionHard(map[string]string{"memory.available": "25%", "nodefs.available": "1Ki", "pid.available": "100"})
	if err != nil {
		t.Fatal(err)
	}
	st := nodeStats{memoryAvailable: 1 << 30, memoryTotal: 8 << 30, nodefs: images.DiskUsage{Total: 4096, Used: 3584}, pidMax: 1000, pidsUsed: 950}
	got := crossedThresholds(st, ths)
	want := []crossing{
		{signal: evictionapi.SignalMemoryAvailable, threshold: 2 << 30, available: 1 << 30},
		{signal: evictionapi.SignalNodeFsAvailable, threshold: 1024, available: 512},
		{signal: evictionapi.SignalPIDAvailable, threshold: 100, available: 50},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("crossed %+v\nwant %+v", got, want)
	}
	st = nodeStats{memoryAvailable: -1, memoryTotal: 8 << 30, nodefs: images.DiskUsage{Total: 4096, Used: 0}, pidMax: 1000, pidsUsed: 10}
	if got := crossedThresholds(st, ths); len(got) != 0 {
		t.Errorf("nothing low (memory unknown): crossed %+v", got)
	}
}
