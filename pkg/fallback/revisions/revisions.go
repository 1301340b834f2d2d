// Package revisions is the on-node layout of a revisioned static pod: each
// revision's manifest and files under the resources directory, the
// last-known-good link, the operand's and the startup monitor's manifests in
// the node agent's manifest directory, and the lock that keeps the installer
// and the startup monitor from writing there at the same time.
//
//	<resources>/kube-apiserver-pod-3/kube-apiserver-pod.yaml
//	<resources>/kube-apiserver-pod-3/configmaps/<name>/<key>
//	<resources>/kube-apiserver-pod-3/secrets/<name>/<key>          (0600)
//	<resources>/kube-apiserver-last-known-good -> kube-apiserver-pod-2/kube-apiserver-pod.yaml
//	<manifests>/kube-apiserver.yaml                                 (the operand)
//	<manifests>/kube-apiserver-startup-monitor.yaml
package revisions

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/fallback"
)

// Layout names the files of one operand's revisions on a node.
type Layout struct {
	// Operand is the static pod's name, e.g. "kube-apiserver".
	Operand string
	// ResourcesDir holds the revisions' directories and the
	// last-known-good link.
	ResourcesDir string
	// ManifestsDir is the node agent's manifest directory.
	ManifestsDir string
	// LockPath is the installer lock file.
	LockPath string
}

// ForDataDir is the layout of operand in steadyplane's data directory.
func ForDataDir(dataDir, operand string) Layout {
	return Layout{
		Operand:      operand,
		ResourcesDir: filepath.Join(dataDir, "static-pod-resources"),
		ManifestsDir: filepath.Join(dataDir, "manifests"),
		LockPath:     filepath.Join(dataDir, "locks", operand+"-installer.lock"),
	}
}

// RevisionDir is the directory of revision n.
func (l Layout) RevisionDir(n int) string {
	return filepath.Join(l.ResourcesDir, fmt.Sprintf("%s-pod-%d", l.Operand, n))
}

// RevisionManifest is revision n's pod manifest.
func (l Layout) RevisionManifest(n int) string {
	return filepath.Join(l.RevisionDir(n), l.Operand+"-pod.yaml")
}

// OperandManifest is the manifest the node agent runs.
func (l Layout) OperandManifest() string {
	return filepath.Join(l.ManifestsDir, l.Operand+".yaml")
}

// MonitorManifest is the startup monitor's manifest.
func (l Layout) MonitorManifest() string {
	return filepath.Join(l.ManifestsDir, l.Operand+"-startup-monitor.yaml")
}

// LastKnownGoodLink is the link to the last revision the startup monitor
// found ready.
func (l Layout) LastKnownGoodLink() string {
	return filepath.Join(l.ResourcesDir, l.Operand+"-last-known-good")
}

// Revisions lists the revisions on disk, ascending. Entries that are not a
// revision's directory are ignored.
func (l Layout) Revisions() ([]int, error) {
	entries, err := os.ReadDir(l.ResourcesDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var revs []int
	for _, e := range entries {
		if n, ok := l.revisionOf(e.Name()); ok && e.IsDir() {
			revs = append(revs, n)
		}
	}
	slices.Sort(revs)
	return revs, nil
}

// revisionOf parses "<operand>-pod-<n>".
func (l Layout) revisionOf(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, l.Operand+"-pod-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n > 0 && strconv.Itoa(n) == s
}

// LastKnownGood is the revision the last-known-good link points to, 0 when
// there is no link. A link that does not point into a revision's manifest
// is an error naming it.
func (l Layout) LastKnownGood() (int, error) {
	target, err := os.Readlink(l.LastKnownGoodLink())
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	dir, file := filepath.Split(filepath.Clean(target))
	n, ok := l.revisionOf(filepath.Base(dir))
	if !ok || file != l.Operand+"-pod.yaml" {
		return 0, fmt.Errorf("%s points to %q, not a revision's manifest", l.LastKnownGoodLink(), target)
	}
	return n, nil
}

// SetLastKnownGood points the last-known-good link at revision n, in one
// step (a crash leaves the old link or the new one).
func (l Layout) SetLastKnownGood(n int) error {
	rel, err := filepath.Rel(l.ResourcesDir, l.RevisionManifest(n))
	if err != nil {
		return err
	}
	if _, err := os.Stat(l.RevisionManifest(n)); err != nil {
		return fmt.Errorf("marking revision %d last-known-good: %w", n, err)
	}
	return atomicfile.Symlink(rel, l.LastKnownGoodLink())
}

// FallbackTarget is the revision to fall back to from failed: the one
// last-known-good points to or, without the link (the first rollout after
// an upgrade), the newest earlier revision on disk. ok is false when there
// is none (bootstrap): the failed revision is left alone.
func (l Layout) FallbackTarget(failed int) (n int, ok bool, err error) {
	lkg, err := l.LastKnownGood()
	if err != nil {
		return 0, false, err
	}
	if lkg != 0 && lkg != failed {
		if _, err := os.Stat(l.RevisionManifest(lkg)); err == nil {
			return lkg, true, nil
		}
	}
	revs, err := l.Revisions()
	if err != nil {
		return 0, false, err
	}
	for i := len(revs) - 1; i >= 0; i-- {
		if revs[i] < failed {
			if _, err := os.Stat(l.RevisionManifest(revs[i])); err == nil {
				return revs[i], true, nil
			}
		}
	}
	return 0, false, nil
}

// DecodeManifest decodes a pod manifest strictly (unknown fields are
// errors). It neither defaults nor validates: whether the node agent runs
// it is staticpod.Parse's to say.
func DecodeManifest(data []byte) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		return nil, err
	}
	return &pod, nil
}

// InstalledRevision is the revision annotation of the operand manifest in
// place; 0 when it is missing, does not decode or has none.
func (l Layout) InstalledRevision() int {
	data, err := os.ReadFile(l.OperandManifest())
	if err != nil {
		return 0
	}
	pod, err := DecodeManifest(data)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(pod.Annotations[fallback.RevisionAnnotation])
	return n
}
