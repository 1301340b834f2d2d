package volume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"
)

// subPathDir is where, under a pod's volumes directory, subPaths are pinned
// for the runtime: <volumes>/subpaths/<volume>/<container>/<index>, the
// layout of the kubelet's volume-subpaths.
const subPathDir = "subpaths"

// resolveSubPath returns the directory or file subPath names inside the
// volume at root, made as a directory if missing. The check and the making
// never follow a symbolic link out of the volume (they resolve inside it);
// a subPath whose links would lead out of the volume on the host is refused,
// as the kubelet refuses it.
func resolveSubPath(root, subPath string) (*os.File, error) {
	sub := filepath.Clean(subPath)
	if filepath.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, "../") {
		return nil, errors.New("it leaves the volume")
	}
	rootDir, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer rootDir.Close()
	h, err := pathrs.OpenatInRoot(rootDir, sub)
	if errors.Is(err, os.ErrNotExist) {
		h, err = pathrs.MkdirAllHandle(rootDir, sub, 0o755)
	}
	// The handle is confined to the volume whatever the links say; a link
	// that, followed on the host, leaves the volume is refused all the same,
	// so that a pod does not get a different file than it named.
	if !inside(root, sub) {
		if err == nil {
			h.Close()
		}
		return nil, errors.New("it leaves the volume")
	}
	return h, err
}

// inside tells whether path sub of root, its links followed as the host
// follows them, is root or under it.
func inside(root, sub string) bool {
	resolved, err := filepath.EvalSymlinks(filepath.Join(root, sub))
	base, berr := filepath.EvalSymlinks(root)
	return err == nil && berr == nil && (resolved == base || strings.HasPrefix(resolved, base+"/"))
}

// pinSubPath bind-mounts what handle h refers to at target, through the
// handle (its /proc/self/fd link) rather than by path: a directory swapped
// for a symbolic link after the check cannot redirect the mount (the class
// of CVE-2017-1002101 and CVE-2021-25741, fixed the same way by the
// kubelet). A mount left at target by an earlier run is replaced.
func pinSubPath(h *os.File, target string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return err
	}
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting the subPath of an earlier run: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	} else {
		f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			return err
		}
		f.Close()
	}
	src := fmt.Sprintf("/proc/self/fd/%d", h.Fd())
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting the subPath: %w", err)
	}
	return nil
}
