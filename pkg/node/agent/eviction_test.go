package agent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
