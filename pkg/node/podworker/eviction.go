package podworker

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/volume"
)

// ReasonEvicted is the reason of a pod the node evicted, as the kubelet's.
const ReasonEvicted = "Evicted"

// Messages of local storage evictions, as the kubelet's eviction manager
// writes them.
const (
	emptyDirMessageFmt                  = "Usage of EmptyDir volume %q exceeds the limit %q. "
	containerEphemeralStorageMessageFmt = "Container %s exceeded its local ephemeral storage limit %q. "
)

// storageCheckPeriod is how often a pod's local storage is measured, as the
// kubelet's eviction manager's period.
const storageCheckPeriod = 10 * time.Second

// storageUsage is what a pod uses on the node's disk, in bytes.
type storageUsage struct {
	// emptyDirs by volume name.
	emptyDirs map[string]int64
	// containers by name: the writable layer and the logs.
	containers map[string]int64
}

// storageViolation decides, as the kubelet's eviction manager does for
// local storage, whether pod must be evicted: an emptyDir over its
// sizeLimit, or a container over its ephemeral-storage limit. It returns
// the eviction message, or "".
func storageViolation(pod *corev1.Pod, u storageUsage) string {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.IsZero() {
			continue
		}
		if used, ok := u.emptyDirs[v.Name]; ok && used > v.EmptyDir.SizeLimit.Value() {
			return fmt.Sprintf(emptyDirMessageFmt, v.Name, v.EmptyDir.SizeLimit.String())
		}
	}
	for _, c := range pod.Spec.Containers {
		limit, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]
		if !ok || limit.IsZero() {
			continue
		}
		if used, ok := u.containers[c.Name]; ok && used > limit.Value() {
			return fmt.Sprintf(containerEphemeralStorageMessageFmt, c.Name, limit.String())
		}
	}
	return ""
}

// storageUsage measures what pod uses of the node's disk: its emptyDirs,
// and per container its writable layer and logs (not its image, which is
// shared).
func (w *Worker) storageUsage(pod *corev1.Pod) storageUsage {
	names := make([]string, 0, len(w.containers))
	for _, c := range w.containers {
		names = append(names, c.spec.Name)
	}
	return measureStorage(w.podDir(pod), pod, names)
}

// measureStorage measures the disk use of pod in podDir from its files
// alone: emptyDirs, and the writable layers and logs of containers. It
// touches nothing of a worker's, so the eviction manager may call it
// beside the worker.
func measureStorage(podDir string, pod *corev1.Pod, containers []string) storageUsage {
	u := storageUsage{emptyDirs: map[string]int64{}, containers: map[string]int64{}}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil {
			u.emptyDirs[v.Name] = volume.DiskUsage(filepath.Join(podDir, "volumes", "empty-dir", v.Name))
		}
	}
	for _, name := range containers {
		dir := filepath.Join(podDir, name)
		used := volume.DiskUsage(filepath.Join(dir, "rw"))
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log*"))
		for _, l := range logs {
			used += volume.DiskUsage(l)
		}
		u.containers[name] = used
	}
	return u
}

// pastActiveDeadline reports whether pod, started on the node at start,
// has run for its activeDeadlineSeconds at now.
func pastActiveDeadline(pod *corev1.Pod, start, now time.Time) bool {
	d := pod.Spec.ActiveDeadlineSeconds
	return d != nil && !start.IsZero() && now.Sub(start) >= time.Duration(*d)*time.Second
}

// end stops pod's containers for good (with grace) and records why, as
// the pod's life already says (podEnded): an event, the Failed status.
// Nothing of it runs or is set up again; its volumes and sandbox go.
func (w *Worker) end(ctx context.Context, pod *corev1.Pod, eventType, reason, msg string, grace time.Duration) {
	klog.InfoS("Ending a pod for good", "pod", klog.KObj(pod), "reason", reason, "message", msg)
	w.host.Event(pod, eventType, reason, "%s", msg)
	w.stopAll(pod, grace)
	w.write(ctx, pod)
	w.recordLocal(pod)
	w.teardownPod(ctx, pod)
}
