// Package volume makes a pod's volumes on the node: hostPath, emptyDir,
// configMap, secret, downwardAPI and projected (service-account token,
// configMap, secret, downwardAPI), claims of local and hostPath
// PersistentVolumes (bind-mounted as a hostPath), written with upstream's atomic writer
// and payload functions so that files, modes and updates are the kubelet's;
// and image volumes, through the node's image store (ImageMounter).
// Any other kind of volume is refused with a message, never ignored.
package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// ErrUnsupported marks a pod this node cannot give its volumes
// (CreateContainerConfigError).
var ErrUnsupported = errors.New("unsupported volume")

// Source reads what volumes are made of from the API.
type Source interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	// Token asks for a service-account token bound to the pod.
	Token(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
	// PersistentVolumeClaim and PersistentVolume read a claim of the pod's
	// and the volume bound to it (the Node authorizer lets a node read
	// those of its pods).
	PersistentVolumeClaim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error)
	PersistentVolume(ctx context.Context, name string) (*corev1.PersistentVolume, error)
}

// Check returns an error wrapping ErrUnsupported if pod has a volume of a
// kind this node does not make.
func Check(pod *corev1.Pod) error {
	for _, v := range pod.Spec.Volumes {
		if kind := unsupported(v.VolumeSource); kind != "" {
			return fmt.Errorf("%w: volume %q is of kind %s; the steadyplane node agent makes hostPath, emptyDir, configMap, secret, downwardAPI, projected, image volumes and claims of local or hostPath volumes", ErrUnsupported, v.Name, kind)
		}
	}
	return nil
}

func unsupported(s corev1.VolumeSource) string {
	switch {
	case s.HostPath != nil, s.EmptyDir != nil, s.ConfigMap != nil, s.Secret != nil, s.DownwardAPI != nil:
		return ""
	case s.Projected != nil, s.Image != nil, s.PersistentVolumeClaim != nil:
		return ""
	case s.CSI != nil:
		return "csi"
	case s.Ephemeral != nil:
		return "ephemeral"
	case s.NFS != nil:
		return "nfs"
	}
	return "other"
}

// ImageMounter makes image volume name of source src at target: the image
// pulled as its pull policy says and mounted read-only.
type ImageMounter func(ctx context.Context, name string, src *corev1.ImageVolumeSource, target string) error

// Volumes are one pod's volumes on the node.
type Volumes struct {
	pod         *corev1.Pod
	dir         string // the pod's volumes directory
	src         Source
	allocatable corev1.ResourceList
	// MountImage makes image volumes; nil on a node that runs no images,
	// where they are refused.
	MountImage ImageMounter
	// MemoryBacked makes secret and projected volumes a tmpfs each, as the
	// kubelet keeps them: their keys and tokens never reach the node's
	// disk. It needs root (a node that runs containers under runc).
	MemoryBacked bool

	mu    sync.Mutex
	paths map[string]string    // volume name -> host path
	renew map[string]time.Time // projected volumes with tokens: when to write them again
}

// New returns the volumes of pod, made under dir.
func New(pod *corev1.Pod, dir string, src Source, allocatable corev1.ResourceList) *Volumes {
	return &Volumes{pod: pod, dir: dir, src: src, allocatable: allocatable, paths: map[string]string{}, renew: map[string]time.Time{}}
}

// Setup makes every volume not made yet, and writes again the API's
// volumes (configMap, secret, downwardAPI, projected) so that updates and
// token renewals reach the pod; now decides which tokens are due.
func (v *Volumes) Setup(ctx context.Context, now time.Time, refresh bool) error {
	if err := Check(v.pod); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, vol := range v.pod.Spec.Volumes {
		p, made := v.paths[vol.Name]
		if made && (vol.Image != nil || vol.PersistentVolumeClaim != nil || !refresh && !v.due(vol.Name, now)) {
			// An image volume is made once; a claim is resolved once, as
			// the kubelet mounts it once: a claim being deleted, or the
			// API out of reach, must not stop a pod that has its data.
			continue
		}
		var err error
		switch s := vol.VolumeSource; {
		case s.HostPath != nil:
			p, err = hostPath(s.HostPath)
		case s.PersistentVolumeClaim != nil:
			var local bool
			p, local, err = v.claimPath(ctx, s.PersistentVolumeClaim.ClaimName)
			// As the kubelet's local volumes: a hostPath volume's, or a
			// claim mounted read-only, files keep their owners.
			if err == nil && local && !s.PersistentVolumeClaim.ReadOnly {
				err = v.setOwnership(p, false, true)
			}
		case s.Image != nil:
			if v.MountImage == nil {
				return fmt.Errorf("%w: volume %q is an image volume, which needs a node that runs containers from images (--runtime=runc)", ErrUnsupported, vol.Name)
			}
			p = filepath.Join(v.dir, "image", vol.Name)
			err = v.MountImage(ctx, vol.Name, s.Image, p)
		case s.EmptyDir != nil:
			p = filepath.Join(v.dir, "empty-dir", vol.Name)
			if err = os.MkdirAll(p, 0o777); err == nil {
				err = os.Chmod(p, 0o777) // any user of the pod writes there, as with the kubelet
			}
			if err == nil && !made && s.EmptyDir.Medium == corev1.StorageMediumMemory {
				err = v.mountMemoryDir(p, s.EmptyDir)
			}
			if err == nil && !made {
				err = v.setOwnership(p, false, false)
			}
		default:
			p = filepath.Join(v.dir, "api", vol.Name)
			if !made && v.MemoryBacked && (s.Secret != nil || s.Projected != nil) {
				err = mountMemory(p)
			}
			if err == nil {
				err = v.writeAPIVolume(ctx, vol, p, now)
			}
		}
		if err != nil {
			return fmt.Errorf("volume %q: %w", vol.Name, err)
		}
		v.paths[vol.Name] = p
	}
	return nil
}

// SetPod gives the volumes the pod as the API has it now: downward API
// files follow its labels and annotations at the next refresh.
func (v *Volumes) SetPod(pod *corev1.Pod) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pod = pod
}

func (v *Volumes) due(name string, now time.Time) bool {
	at, ok := v.renew[name]
	return ok && !now.Before(at)
}

// Mounts returns the bind mounts of container c: each volumeMount's volume
// (or subPath inside it) at its mountPath. Volumes must be set up. With pin,
// each subPath is bind-mounted through a file descriptor under the pod's
// volumes directory and that mount is the source (see pinSubPath): what a
// runtime that mounts by path (runc) needs; without it (host processes,
// which mount nothing) the source is the subPath's path.
func (v *Volumes) Mounts(c *corev1.Container, pin bool) ([]runtime.Mount, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var mounts []runtime.Mount
	for i, m := range c.VolumeMounts {
		src, ok := v.paths[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %q: no volume of that name is set up", m.Name)
		}
		if m.SubPath != "" {
			var err error
			if src, err = v.subPath(src, m, c.Name, i, pin); err != nil {
				return nil, fmt.Errorf("volume mount %q: subPath %q: %w", m.Name, m.SubPath, err)
			}
		}
		mounts = append(mounts, runtime.Mount{Source: src, Destination: m.MountPath, ReadOnly: m.ReadOnly || v.readOnlyVolume(m.Name)})
	}
	return mounts, nil
}

// subPath returns the source of mount m (the i-th of container): the
// subPath inside the volume at root, pinned if pin says so.
func (v *Volumes) subPath(root string, m corev1.VolumeMount, container string, i int, pin bool) (string, error) {
	h, err := resolveSubPath(root, m.SubPath)
	if err != nil {
		return "", err
	}
	defer h.Close()
	if !pin {
		return filepath.EvalSymlinks(filepath.Join(root, m.SubPath))
	}
	target := filepath.Join(v.dir, subPathDir, m.Name, container, strconv.Itoa(i))
	if err := pinSubPath(h, target); err != nil {
		return "", err
	}
	return target, nil
}

// readOnlyVolume: API-made volumes and image volumes are read-only in the
// container, as the kubelet mounts them, and a claim the pod names
// read-only.
func (v *Volumes) readOnlyVolume(name string) bool {
	for _, vol := range v.pod.Spec.Volumes {
		if vol.Name == name {
			s := vol.VolumeSource
			return s.ConfigMap != nil || s.Secret != nil || s.DownwardAPI != nil || s.Projected != nil || s.Image != nil ||
				s.PersistentVolumeClaim != nil && s.PersistentVolumeClaim.ReadOnly
		}
	}
	return false
}

// ClientSource reads volumes' objects from the API with a client.
type ClientSource struct{ Client kubernetes.Interface }

// ConfigMap implements Source.
func (c ClientSource) ConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return c.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

// Secret implements Source.
func (c ClientSource) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return c.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

// PersistentVolumeClaim implements Source.
func (c ClientSource) PersistentVolumeClaim(ctx context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	return c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
}

// PersistentVolume implements Source.
func (c ClientSource) PersistentVolume(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	return c.Client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
}

// Token implements Source.
func (c ClientSource) Token(ctx context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
}

// EmptyDirPath is where the pod's emptyDir volume name is kept, made or not.
func (v *Volumes) EmptyDirPath(name string) string {
	return filepath.Join(v.dir, "empty-dir", name)
}

// DiskUsage is the disk space the files under dir take (du's sense: the
// blocks allocated; hard links counted once); 0 for a dir that does not exist.
func DiskUsage(dir string) int64 {
	var total int64
	seen := map[uint64]bool{}
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if st.Nlink > 1 {
				if seen[st.Ino] {
					return nil
				}
				seen[st.Ino] = true
			}
			total += st.Blocks * 512
		}
		return nil
	})
	return total
}

// ConfigMapOf reads ConfigMap ns/name from src: found is false, with no
// error, for one that does not exist and is optional, as the kubelet lets
// an optional reference go. A nil src (a node without an API) has none.
func ConfigMapOf(ctx context.Context, src Source, ns, name string, optional bool) (cm *corev1.ConfigMap, found bool, err error) {
	if src == nil {
		return nil, false, fmt.Errorf("ConfigMap %s/%s: this pod's node reads no ConfigMaps (a static pod without an API server)", ns, name)
	}
	cm, err = src.ConfigMap(ctx, ns, name)
	if apierrors.IsNotFound(err) && optional {
		return nil, false, nil
	}
	return cm, err == nil, err
}

// SecretOf reads Secret ns/name from src as ConfigMapOf reads a ConfigMap.
func SecretOf(ctx context.Context, src Source, ns, name string, optional bool) (s *corev1.Secret, found bool, err error) {
	if src == nil {
		return nil, false, fmt.Errorf("Secret %s/%s: this pod's node reads no Secrets (a static pod without an API server)", ns, name)
	}
	s, err = src.Secret(ctx, ns, name)
	if apierrors.IsNotFound(err) && optional {
		return nil, false, nil
	}
	return s, err == nil, err
}
