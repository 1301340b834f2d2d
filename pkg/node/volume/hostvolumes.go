package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	volumepkg "k8s.io/kubernetes/pkg/volume"
)

// Volumes that are directories of the node: hostPath, claims of local
// and hostPath PersistentVolumes, memory-backed directories, and the
// pod's fsGroup given to them.

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
