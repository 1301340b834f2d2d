package runc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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

// overlayOptions returns the overlayfs mount options that stack layers
// (top first) under upper. It refuses a path the option syntax cannot
// carry, and a stack longer than a mount's options may be (one page).
func overlayOptions(layers []string, upper, work string) (string, error) {
	if len(layers) == 0 {
		return "", errors.New("an image root filesystem needs at least one layer")
	}
	for _, p := range append([]string{upper, work}, layers...) {
		if strings.ContainsAny(p, ",:") {
			return "", fmt.Errorf("path %q has a comma or colon, which overlayfs options cannot carry", p)
		}
	}
	opts := "lowerdir=" + strings.Join(layers, ":") + ",upperdir=" + upper + ",workdir=" + work
	if len(opts) >= os.Getpagesize() {
		return "", fmt.Errorf("an image of %d layers makes overlayfs options of %d bytes, more than the kernel's %d", len(layers), len(opts), os.Getpagesize())
	}
	return opts, nil
}

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
	opts, err := overlayOptions(rootfs.Layers, upper, work)
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
