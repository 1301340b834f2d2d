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
	"path"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/kubernetes/pkg/api/v1/resource"
	volumepkg "k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/configmap"
	"k8s.io/kubernetes/pkg/volume/downwardapi"
	"k8s.io/kubernetes/pkg/volume/secret"
	volumeutil "k8s.io/kubernetes/pkg/volume/util"

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

// claimPath is the directory on this node of the volume bound to the
// pod's claim: a local volume's path (local true), or a hostPath volume's
// (checked as a hostPath volume is). A local volume's directory must exist: made
// again empty, it would hide that the data is gone.
func (v *Volumes) claimPath(ctx context.Context, claim string) (path string, local bool, err error) {
	pvc, err := v.src.PersistentVolumeClaim(ctx, v.pod.Namespace, claim)
	if err != nil {
		return "", false, fmt.Errorf("claim %s: %w", claim, err)
	}
	if pvc.DeletionTimestamp != nil {
		return "", false, fmt.Errorf("claim %s is being deleted", claim)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return "", false, fmt.Errorf("claim %s is %s, not bound to a volume yet", claim, pvc.Status.Phase)
	}
	pv, err := v.src.PersistentVolume(ctx, pvc.Spec.VolumeName)
	if err != nil {
		return "", false, fmt.Errorf("claim %s: volume %s: %w", claim, pvc.Spec.VolumeName, err)
	}
	switch {
	case pv.Spec.Local != nil:
		p := filepath.Clean(pv.Spec.Local.Path)
		st, err := os.Stat(p)
		if err != nil {
			return "", false, fmt.Errorf("claim %s: local volume %s: %w", claim, pv.Name, err)
		}
		if !st.IsDir() {
			return "", false, fmt.Errorf("claim %s: local volume %s: %s is not a directory (block volumes are not supported)", claim, pv.Name, p)
		}
		return p, true, nil
	case pv.Spec.HostPath != nil:
		p, err := hostPath(pv.Spec.HostPath)
		return p, false, err
	}
	return "", false, fmt.Errorf("%w: claim %s is bound to volume %s, which is neither local nor hostPath", ErrUnsupported, claim, pv.Name)
}

// SetPod gives the volumes the pod as the API has it now: downward API
// files follow its labels and annotations at the next refresh.
func (v *Volumes) SetPod(pod *corev1.Pod) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pod = pod
}

// setOwnership gives the pod's fsGroup the files of a volume at p, group
// readable (and writable unless readOnly), with upstream's own walk;
// nothing without an fsGroup. Only a claim's volume honours the pod's
// fsGroupChangePolicy (withPolicy), as with the kubelet: a volume the node
// writes again (the API's) must be walked every time, and an emptyDir is
// new.
func (v *Volumes) setOwnership(p string, readOnly, withPolicy bool) error {
	sc := v.pod.Spec.SecurityContext
	if sc == nil || sc.FSGroup == nil {
		return nil
	}
	var policy *corev1.PodFSGroupChangePolicy
	if withPolicy {
		policy = sc.FSGroupChangePolicy
	}
	return volumepkg.NewVolumeOwnership(ownedDir{path: p, readOnly: readOnly}, p, sc.FSGroup, policy, nil).ChangePermissions()
}

// ownedDir is what upstream's ownership walk asks of a volume: its
// path and whether it is mounted read-only.
type ownedDir struct {
	path     string
	readOnly bool
}

var _ volumepkg.Mounter = ownedDir{}

func (d ownedDir) GetPath() string { return d.path }

func (d ownedDir) GetAttributes() volumepkg.Attributes {
	return volumepkg.Attributes{ReadOnly: d.readOnly}
}

func (ownedDir) GetMetrics() (*volumepkg.Metrics, error) {
	return nil, errors.New("not measured")
}

func (ownedDir) SetUp(volumepkg.MounterArgs) error { return errors.New("not a volume plugin") }

func (ownedDir) SetUpAt(string, volumepkg.MounterArgs) error {
	return errors.New("not a volume plugin")
}

// mountMemoryDir makes an emptyDir of medium Memory a tmpfs, as the
// kubelet does: its files are memory, charged to the pod's containers
// that write them, of at most its sizeLimit, or else the pod's memory
// limit, or else the node's allocatable memory. On a node that does not
// isolate its pods (no root) it stays a directory on disk.
func (v *Volumes) mountMemoryDir(p string, s *corev1.EmptyDirVolumeSource) error {
	if !v.MemoryBacked {
		return nil
	}
	if mounted, err := mountinfo.Mounted(p); err != nil || mounted {
		return err
	}
	// Files there already are a running pod's, from an agent that kept
	// this medium on disk: a tmpfs over them would hide them from its
	// containers' next start.
	if entries, err := os.ReadDir(p); err != nil || len(entries) > 0 {
		return err
	}
	size := v.allocatable.Memory().Value()
	if limit, ok := resourcehelper.PodLimits(v.pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceMemory]; ok && !limit.IsZero() {
		size = limit.Value()
	}
	if s.SizeLimit != nil && !s.SizeLimit.IsZero() && (size == 0 || s.SizeLimit.Value() < size) {
		size = s.SizeLimit.Value()
	}
	opts := "mode=0777"
	if size > 0 {
		opts += ",size=" + strconv.FormatInt(size, 10)
	}
	if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("a tmpfs at %s: %w", p, err)
	}
	return nil
}

// mountMemory makes p a tmpfs, unless it is a mount point already: the
// pod's, from before a restart of the agent, which its containers see
// (a second tmpfs over it would take the updates they never see).
func mountMemory(p string) error {
	if err := os.MkdirAll(p, 0o755); err != nil {
		return err
	}
	if mounted, err := mountinfo.Mounted(p); err != nil || mounted {
		return err
	}
	if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755"); err != nil {
		return fmt.Errorf("a tmpfs at %s: %w", p, err)
	}
	return nil
}

func (v *Volumes) due(name string, now time.Time) bool {
	at, ok := v.renew[name]
	return ok && !now.Before(at)
}

func hostPath(s *corev1.HostPathVolumeSource) (string, error) {
	p := filepath.Clean(s.Path)
	st, err := os.Stat(p)
	t := corev1.HostPathUnset
	if s.Type != nil {
		t = *s.Type
	}
	switch t {
	case corev1.HostPathUnset:
		return p, nil
	case corev1.HostPathDirectoryOrCreate:
		if err != nil {
			return p, os.MkdirAll(p, 0o755)
		}
		if !st.IsDir() {
			return "", fmt.Errorf("hostPath %s is not a directory", p)
		}
	case corev1.HostPathDirectory:
		if err != nil || !st.IsDir() {
			return "", fmt.Errorf("hostPath type check failed: %s is not a directory", p)
		}
	case corev1.HostPathFileOrCreate:
		if err != nil {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return "", err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return "", err
			}
			return p, f.Close()
		}
		if !st.Mode().IsRegular() {
			return "", fmt.Errorf("hostPath %s is not a file", p)
		}
	case corev1.HostPathFile:
		if err != nil || !st.Mode().IsRegular() {
			return "", fmt.Errorf("hostPath type check failed: %s is not a file", p)
		}
	case corev1.HostPathSocket:
		if err != nil || st.Mode()&os.ModeSocket == 0 {
			return "", fmt.Errorf("hostPath type check failed: %s is not a socket", p)
		}
	default:
		if err != nil {
			return "", fmt.Errorf("hostPath type check failed: %s: %v", p, err)
		}
	}
	return p, nil
}

// writeAPIVolume writes a volume made of API objects atomically into p.
func (v *Volumes) writeAPIVolume(ctx context.Context, vol corev1.Volume, p string, now time.Time) error {
	payload, renewAt, err := v.payload(ctx, vol, now)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return err
	}
	w, err := volumeutil.NewAtomicWriter(p, "volume "+vol.Name)
	if err != nil {
		return err
	}
	// The whole volume, each time: a first write makes files outside the
	// timestamped directory too (as the kubelet's volumes do).
	setPerms := func(string) error { return v.setOwnership(p, true, false) }
	if err := w.Write(payload, setPerms); err != nil {
		return err
	}
	if !renewAt.IsZero() {
		v.renew[vol.Name] = renewAt
	}
	return nil
}

func mode(m *int32) *int32 {
	if m != nil {
		return m
	}
	d := corev1.ConfigMapVolumeSourceDefaultMode // 0644, the API's default for every kind
	return &d
}

func optional(b *bool) bool { return b != nil && *b }

// payload returns the files of vol, and when a token in it is due for renewal.
func (v *Volumes) payload(ctx context.Context, vol corev1.Volume, now time.Time) (map[string]volumeutil.FileProjection, time.Time, error) {
	ns := v.pod.Namespace
	switch s := vol.VolumeSource; {
	case s.ConfigMap != nil:
		cm, err := v.configMap(ctx, ns, s.ConfigMap.Name, optional(s.ConfigMap.Optional))
		if err != nil {
			return nil, time.Time{}, err
		}
		p, err := configmap.MakePayload(s.ConfigMap.Items, cm, mode(s.ConfigMap.DefaultMode), optional(s.ConfigMap.Optional))
		return p, time.Time{}, err
	case s.Secret != nil:
		sec, err := v.secret(ctx, ns, s.Secret.SecretName, optional(s.Secret.Optional))
		if err != nil {
			return nil, time.Time{}, err
		}
		p, err := secret.MakePayload(s.Secret.Items, sec, mode(s.Secret.DefaultMode), optional(s.Secret.Optional))
		return p, time.Time{}, err
	case s.DownwardAPI != nil:
		p, err := v.downward(s.DownwardAPI.Items, mode(s.DownwardAPI.DefaultMode))
		return p, time.Time{}, err
	case s.Projected != nil:
		return v.projected(ctx, s.Projected, now)
	}
	return nil, time.Time{}, fmt.Errorf("%w: no source", ErrUnsupported)
}

// configMap reads a volume's ConfigMap; an optional one that does not
// exist is empty.
func (v *Volumes) configMap(ctx context.Context, ns, name string, opt bool) (*corev1.ConfigMap, error) {
	cm, found, err := ConfigMapOf(ctx, v.src, ns, name, opt)
	switch {
	case err != nil:
		return nil, fmt.Errorf("configmap %q: %w", name, err)
	case !found:
		return &corev1.ConfigMap{}, nil
	}
	return cm, nil
}

// secret reads a volume's Secret; an optional one that does not exist is
// empty.
func (v *Volumes) secret(ctx context.Context, ns, name string, opt bool) (*corev1.Secret, error) {
	s, found, err := SecretOf(ctx, v.src, ns, name, opt)
	switch {
	case err != nil:
		return nil, fmt.Errorf("secret %q: %w", name, err)
	case !found:
		return &corev1.Secret{}, nil
	}
	return s, nil
}

// downward collects downward API files: object fields by upstream's
// CollectData, resource fields against the node's allocatable resources.
func (v *Volumes) downward(items []corev1.DownwardAPIVolumeFile, defaultMode *int32) (map[string]volumeutil.FileProjection, error) {
	var fields []corev1.DownwardAPIVolumeFile
	out := map[string]volumeutil.FileProjection{}
	for _, it := range items {
		if it.ResourceFieldRef == nil {
			fields = append(fields, it)
			continue
		}
		val, err := resource.ExtractResourceValueByContainerNameAndNodeAllocatable(it.ResourceFieldRef, v.pod, it.ResourceFieldRef.ContainerName, v.allocatable)
		if err != nil {
			return nil, err
		}
		m := *defaultMode
		if it.Mode != nil {
			m = *it.Mode
		}
		out[path.Clean(it.Path)] = volumeutil.FileProjection{Data: []byte(val), Mode: m}
	}
	got, err := downwardapi.CollectData(fields, v.pod, nil, defaultMode)
	if err != nil {
		return nil, err
	}
	for k, f := range got {
		out[k] = f
	}
	return out, nil
}

// projected merges its sources' files, as the kubelet's projected volume;
// a token is renewed at 80% of its lifetime.
func (v *Volumes) projected(ctx context.Context, s *corev1.ProjectedVolumeSource, now time.Time) (map[string]volumeutil.FileProjection, time.Time, error) {
	out := map[string]volumeutil.FileProjection{}
	var renewAt time.Time
	dm := mode(s.DefaultMode)
	for _, src := range s.Sources {
		var files map[string]volumeutil.FileProjection
		var err error
		switch {
		case src.ConfigMap != nil:
			var cm *corev1.ConfigMap
			if cm, err = v.configMap(ctx, v.pod.Namespace, src.ConfigMap.Name, optional(src.ConfigMap.Optional)); err == nil {
				files, err = configmap.MakePayload(src.ConfigMap.Items, cm, dm, optional(src.ConfigMap.Optional))
			}
		case src.Secret != nil:
			var sec *corev1.Secret
			if sec, err = v.secret(ctx, v.pod.Namespace, src.Secret.Name, optional(src.Secret.Optional)); err == nil {
				files, err = secret.MakePayload(src.Secret.Items, sec, dm, optional(src.Secret.Optional))
			}
		case src.DownwardAPI != nil:
			files, err = v.downward(src.DownwardAPI.Items, dm)
		case src.ServiceAccountToken != nil:
			var tok string
			var at time.Time
			tok, at, err = v.token(ctx, src.ServiceAccountToken, now)
			if err == nil {
				files = map[string]volumeutil.FileProjection{src.ServiceAccountToken.Path: {Data: []byte(tok), Mode: *dm}}
				if renewAt.IsZero() || at.Before(renewAt) {
					renewAt = at
				}
			}
		default:
			err = fmt.Errorf("%w: a projected source of a kind the node agent does not make", ErrUnsupported)
		}
		if err != nil {
			return nil, time.Time{}, err
		}
		for k, f := range files {
			out[k] = f
		}
	}
	return out, renewAt, nil
}

// token asks for a service-account token bound to the pod, and says when
// to renew it (80% of its lifetime, as the kubelet).
func (v *Volumes) token(ctx context.Context, s *corev1.ServiceAccountTokenProjection, now time.Time) (string, time.Time, error) {
	sa := v.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	exp := int64(3600)
	if s.ExpirationSeconds != nil {
		exp = *s.ExpirationSeconds
	}
	var aud []string
	if s.Audience != "" {
		aud = []string{s.Audience}
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: aud, ExpirationSeconds: &exp,
		BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: v.pod.Name, UID: v.pod.UID},
	}}
	got, err := v.src.Token(ctx, v.pod.Namespace, sa, req)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("service account %q token: %w", sa, err)
	}
	life := got.Status.ExpirationTimestamp.Sub(now)
	if life <= 0 {
		life = time.Duration(exp) * time.Second
	}
	return got.Status.Token, now.Add(life * 8 / 10), nil
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
