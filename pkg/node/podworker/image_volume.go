package podworker

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/volume"
)

// imageVolumeLease is the lease that keeps the layers of pod's image volume
// name in the store while the pod has it mounted (container leases are
// "<uid>_<container>", and container names have no '_').
func imageVolumeLease(pod *corev1.Pod, name string) string {
	return fmt.Sprintf("%s_image-volume_%s", pod.UID, name)
}

// imageVolumes returns what mounts pod's image volumes, as the kubelet does
// through its runtime: the image pulled as the volume's pull policy says
// (the pod's pull secrets, events and pull backoff as for a container's
// image), its layers leased for the pod's life and mounted read-only, without
// devices or set-user-ID programs. Nil where containers do not run from
// images: image volumes are refused there.
func (w *Worker) imageVolumes(pod *corev1.Pod) volume.ImageMounter {
	imgs := w.node.Images
	if imgs == nil || !w.node.Runtime.Isolated() {
		return nil
	}
	// The pod's setup is tried at every sync: a failed pull, lease or mount
	// is tried again after startRetry, as a container's start, so that its
	// events (and the pull backoff's) are not sent every second.
	type failure struct {
		err       error
		notBefore time.Time
	}
	failed := map[string]failure{}
	return func(ctx context.Context, name string, src *corev1.ImageVolumeSource, target string) error {
		// Resolved once per pod: one a previous agent mounted stays, with
		// its lease, and is not pulled again.
		if mounted, err := mountinfo.Mounted(target); err == nil && mounted {
			return nil
		}
		if f, ok := failed[name]; ok && time.Now().Before(f.notBefore) {
			return f.err
		}
		err := mountImageVolume(ctx, imgs, pod, name, src, target, func() []corev1.Secret { return w.pullSecrets(ctx, pod) },
			func(eventType, reason, format string, args ...any) {
				w.host.Event(pod, eventType, reason, format, args...)
			})
		if err != nil {
			err = fmt.Errorf("image volume %q: %w", name, err)
			failed[name] = failure{err, time.Now().Add(startRetry)}
			return err
		}
		delete(failed, name)
		return nil
	}
}

// mountImageVolume pulls the image of pod's volume name as its policy says,
// leases its layers and mounts them read-only at target.
func mountImageVolume(ctx context.Context, imgs *ImageService, pod *corev1.Pod, name string, src *corev1.ImageVolumeSource, target string,
	secrets func() []corev1.Secret, event func(eventType, reason, format string, args ...any)) error {
	ref := &corev1.Container{Name: name, Image: src.Reference, ImagePullPolicy: src.PullPolicy}
	img, err := imgs.ensure(ctx, pod, ref, secrets, event)
	if err != nil {
		return err
	}
	if err := imgs.store.Lease(imageVolumeLease(pod, name), img.Image); err != nil {
		return fmt.Errorf("leasing the image's layers: %w", err)
	}
	return runtime.MountLayersReadOnly(target, filepath.Join(filepath.Dir(target), "."+name+"-empty"), img.layers)
}

// releaseImageVolumes gives back the layers of pod's image volumes, once
// they are unmounted.
func releaseImageVolumes(imgs *ImageService, pod *corev1.Pod) {
	for _, v := range pod.Spec.Volumes {
		if v.Image == nil {
			continue
		}
		if err := imgs.store.Release(imageVolumeLease(pod, v.Name)); err != nil {
			klog.ErrorS(err, "Releasing an image volume's layers", "pod", klog.KObj(pod), "volume", v.Name)
		}
	}
}
