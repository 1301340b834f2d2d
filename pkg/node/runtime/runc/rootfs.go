package runc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// Directories of a container's writable layer, in its directory: the
// overlayfs upper and work directories, made fresh for every run (a
// restarted container starts from its image again, as under containerd).
const (
	upperDir = "rw/upper"
	workDir  = "rw/work"
)

// mountImageRootfs mounts rootfs's layers at target under a fresh
// writable layer in the container's directory dir. A mount a previous run
// left there is taken down first.
func mountImageRootfs(target, dir string, rootfs *runtime.Rootfs) error {
	if err := unmountAt(target); err != nil {
		return err
	}
	upper, work := filepath.Join(dir, upperDir), filepath.Join(dir, workDir)
	if err := os.RemoveAll(filepath.Join(dir, "rw")); err != nil {
		return fmt.Errorf("removing the previous run's writable layer: %w", err)
	}
	for _, d := range []string{upper, work, target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts, err := runtime.OverlayOptions(rootfs.Layers, upper, work)
	if err != nil {
		return err
	}
	if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting the image's layers: %w", err)
	}
	return nil
}

// unmountAt takes down the mount at target, if there is one.
func unmountAt(target string) error {
	mounted, err := mountinfo.Mounted(target)
	if errors.Is(err, os.ErrNotExist) || err == nil && !mounted {
		return nil
	}
	if err != nil {
		return err
	}
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmounting %s: %w", target, err)
	}
	return nil
}
