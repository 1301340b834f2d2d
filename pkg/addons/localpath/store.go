// Package localpath is the cluster's default storage: node-local volumes
// provisioned on demand, as k3s's and kind's local-path provisioner give
// them, on the upstream provisioner library
// (sigs.k8s.io/sig-storage-lib-external-provisioner).
//
// Two halves. The provisioner (Provisioner, run by the add-on
// controllers) answers claims of the StorageClasses whose provisioner is
// ProvisionerName: once the scheduler has chosen a node for the claim's
// first pod (WaitForFirstConsumer), it asks that node's agent, over the
// node API, for a directory (Store, served at /volumes/local/<pv>) and
// makes a PersistentVolume of type local, bound to that node by its node
// affinity; when the volume is released and its reclaim policy is Delete,
// it asks the node to remove the directory. The node agent mounts the
// directory into the claim's pods like a hostPath.
//
// The node never takes a path from its caller: the directory is the PV's
// name under the node's storage root, and the name is checked first.
package localpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/steadyplane/steadyplane/pkg/node/kubeletapi"
)

// Volume is what a node says about a volume directory it made.
type Volume = kubeletapi.LocalVolume

// Store makes and removes volume directories under Root, on the node.
type Store struct {
	Root string
}

var _ kubeletapi.LocalVolumes = Store{}

// ErrBadName marks a volume name that is not a PersistentVolume's name
// (the node API's bad request).
var ErrBadName = fmt.Errorf("%w: not a PersistentVolume name", kubeletapi.ErrBadRequest)

// dir is the directory of volume name, after checking the name: a
// DNS-1123 subdomain (the API's rule for PV names) has no slash and is
// never "." or "..", so the directory is always a child of Root.
func (s Store) dir(name string) (string, error) {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("%w: %q: %s", ErrBadName, name, strings.Join(errs, "; "))
	}
	return filepath.Join(s.Root, name), nil
}

// Create makes the directory of volume name (again, when it exists: a
// retried request), writable by any user of the pods that mount it, under
// a root only root may enter.
func (s Store) Create(name string) (Volume, error) {
	dir, err := s.dir(name)
	if err != nil {
		return Volume{}, err
	}
	if err := os.MkdirAll(s.Root, 0o700); err != nil {
		return Volume{}, err
	}
	if err := os.Chmod(s.Root, 0o700); err != nil {
		return Volume{}, err
	}
	if err := os.Mkdir(dir, 0o777); err != nil && !errors.Is(err, os.ErrExist) {
		return Volume{}, err
	}
	// The umask took bits off; the pods' users, whoever they are, write
	// here (as with local-path and the kubelet's emptyDir).
	if err := os.Chmod(dir, 0o777); err != nil {
		return Volume{}, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Volume{}, err
	}
	return Volume{Path: dir, CapacityBytes: int64(st.Blocks) * st.Bsize, AvailableBytes: int64(st.Bavail) * st.Bsize}, nil
}

// Remove deletes the directory of volume name and all in it; a directory
// that is not there is removed already.
func (s Store) Remove(name string) error {
	dir, err := s.dir(name)
	if err != nil {
		return err
	}
	return os.RemoveAll(dir)
}
