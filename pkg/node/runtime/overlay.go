package runtime

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// OverlayOptions returns the overlayfs mount options that stack layers
// (top first) under upper, with work as overlayfs's work directory; with
// upper "" the stack is read-only. It refuses a path the option syntax
// cannot carry, and a stack longer than a mount's options may be (one page).
func OverlayOptions(layers []string, upper, work string) (string, error) {
	if len(layers) == 0 {
		return "", errors.New("an image root filesystem needs at least one layer")
	}
	paths := layers
	if upper != "" {
		paths = append([]string{upper, work}, layers...)
	}
	for _, p := range paths {
		if strings.ContainsAny(p, ",:") {
			return "", fmt.Errorf("path %q has a comma or colon, which overlayfs options cannot carry", p)
		}
	}
	opts := "lowerdir=" + strings.Join(layers, ":")
	if upper != "" {
		opts += ",upperdir=" + upper + ",workdir=" + work
	}
	if len(opts) >= os.Getpagesize() {
		return "", fmt.Errorf("an image of %d layers makes overlayfs options of %d bytes, more than the kernel's %d", len(layers), len(opts), os.Getpagesize())
	}
	return opts, nil
}

// MountLayersReadOnly mounts layers (top first) at target, read-only,
// without devices or set-user-ID programs: an image volume. empty is a
// directory of its own, kept empty, stacked under a single layer (overlayfs
// wants two lower directories when there is no upper one). A mount already
// at target is left as it is.
func MountLayersReadOnly(target, empty string, layers []string) error {
	if len(layers) == 1 {
		layers = []string{layers[0], empty}
	}
	opts, err := OverlayOptions(layers, "", "")
	if err != nil {
		return err
	}
	for _, d := range []string{target, empty} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if mounted, err := mountinfo.Mounted(target); err != nil || mounted {
		return err // mounted before the node agent restarted
	}
	if err := unix.Mount("overlay", target, "overlay", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return fmt.Errorf("mounting the image's layers read-only: %w", err)
	}
	return nil
}
