package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// Whiteout names of the OCI layer format (image-spec layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	// overlayOpaque is the xattr that makes an overlayfs directory hide
	// the lower layers' content of the same directory.
	overlayOpaque = "trusted.overlay.opaque"
)

// UnpackOptions changes what Unpack may do.
type UnpackOptions struct {
	// Rootless skips what needs root: owners are left as the caller's,
	// device nodes are not made, and whiteouts are refused (overlayfs
	// represents them as device nodes and trusted xattrs).
	Rootless bool
}

// Unpack writes the uncompressed layer tar r into dir, which must exist
// and be empty, in the layout overlayfs reads a lower directory in: a
// deleted path (".wh.name") becomes a 0/0 character device, an opaque
// directory (".wh..wh..opq") gets the trusted.overlay.opaque xattr. Every
// path is confined to dir: ".." and absolute names are cleaned into it,
// a parent that is a symbolic link is resolved inside dir, and nothing is
// followed out of it (owners, modes and times are set on the link itself).
// It returns the bytes of file content written.
func Unpack(dir string, r io.Reader, o UnpackOptions) (int64, error) {
	tr := tar.NewReader(r)
	var size int64
	type dirTimes struct {
		path         string
		atime, mtime time.Time
	}
	var dirs []dirTimes
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return size, fmt.Errorf("reading the layer: %w", err)
		}
		name := path.Clean("/" + hdr.Name)
		if name == "/" {
			continue // the root is dir itself; its attributes are ours
		}
		parent, base := path.Split(name)
		parentPath, err := confinedDir(dir, parent)
		if err != nil {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		target := filepath.Join(parentPath, base)

		switch {
		case base == whiteoutOpaque:
			if o.Rootless {
				return size, fmt.Errorf("layer entry %q: an opaque directory needs root to unpack", hdr.Name)
			}
			if err := unix.Lsetxattr(parentPath, overlayOpaque, []byte("y"), 0); err != nil {
				return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
			}
			continue
		case strings.HasPrefix(base, whiteoutPrefix):
			if o.Rootless {
				return size, fmt.Errorf("layer entry %q: a whiteout needs root to unpack", hdr.Name)
			}
			hidden := filepath.Join(parentPath, strings.TrimPrefix(base, whiteoutPrefix))
			if err := removeExisting(hidden, false); err != nil {
				return size, err
			}
			if err := unix.Mknod(hidden, unix.S_IFCHR, 0); err != nil {
				return size, fmt.Errorf("layer entry %q: whiteout: %w", hdr.Name, err)
			}
			continue
		}

		switch hdr.Typeflag {
		case tar.TypeDir:
			if st, err := os.Lstat(target); err == nil && st.IsDir() {
				break
			}
			if err := removeExisting(target, false); err != nil {
				return size, err
			}
			if err := os.Mkdir(target, 0o700); err != nil {
				return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
			}
		case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // TypeRegA is what old tars write
			if err := removeExisting(target, true); err != nil {
				return size, err
			}
			n, err := writeRegular(target, tr)
			size += n
			if err != nil {
				return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
			}
		case tar.TypeSymlink:
			// The link's target is read inside the container's root, never
			// followed here.
			if err := removeExisting(target, true); err != nil {
				return size, err
			}
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
			}
		case tar.TypeLink:
			src, err := securejoin.SecureJoin(dir, path.Clean("/"+hdr.Linkname))
			if err != nil {
				return size, fmt.Errorf("layer entry %q: hard link to %q: %w", hdr.Name, hdr.Linkname, err)
			}
			if st, err := os.Lstat(src); err != nil || !st.Mode().IsRegular() {
				return size, fmt.Errorf("layer entry %q: hard link to %q, which is not a file of this layer", hdr.Name, hdr.Linkname)
			}
			if err := removeExisting(target, true); err != nil {
				return size, err
			}
			if err := os.Link(src, target); err != nil {
				return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
			}
			continue // the file it links to carries the attributes
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			if o.Rootless && hdr.Typeflag != tar.TypeFifo {
				continue // a device node needs root; rootless unpacking leaves it out
			}
			if err := removeExisting(target, true); err != nil {
				return size, err
			}
			mode := uint32(hdr.Mode & 0o7777)
			switch hdr.Typeflag {
			case tar.TypeChar:
				mode |= unix.S_IFCHR
			case tar.TypeBlock:
				mode |= unix.S_IFBLK
			default:
				mode |= unix.S_IFIFO
			}
			if err := unix.Mknod(target, mode, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
				return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
			}
		default:
			continue // global headers and other metadata-only entries
		}

		if err := applyAttributes(target, hdr, o); err != nil {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTimes{target, hdr.AccessTime, hdr.ModTime})
		} else if err := setTimes(target, hdr.AccessTime, hdr.ModTime); err != nil {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	}
	// A directory's time changes with every entry made in it: set them last.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := setTimes(dirs[i].path, dirs[i].atime, dirs[i].mtime); err != nil {
			return size, err
		}
	}
	return size, nil
}

// confinedDir returns the directory rel names inside root, resolving
// symbolic links as if root were "/", and makes it (0755) if it does not
// exist yet, as a layer may list a file before its directory.
func confinedDir(root, rel string) (string, error) {
	p, err := securejoin.SecureJoin(root, rel)
	if err != nil {
		return "", err
	}
	st, err := os.Lstat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := mkdirAllConfined(root, rel); err != nil {
			return "", err
		}
		return securejoin.SecureJoin(root, rel)
	case err != nil:
		return "", err
	case !st.IsDir():
		return "", fmt.Errorf("%s is not a directory", rel)
	}
	return p, nil
}

// mkdirAllConfined makes each missing directory of rel inside root, one
// component at a time, resolving each inside root.
func mkdirAllConfined(root, rel string) error {
	cur := "/"
	for _, part := range strings.Split(strings.Trim(path.Clean("/"+rel), "/"), "/") {
		if part == "" {
			continue
		}
		cur = path.Join(cur, part)
		p, err := securejoin.SecureJoin(root, cur)
		if err != nil {
			return err
		}
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// removeExisting clears the way for a new entry at p: a later entry
// replaces an earlier one of the same name. An existing directory is kept
// unless replaceDir (a directory entry over a directory merges with it).
func removeExisting(p string, replaceDir bool) error {
	st, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() && !replaceDir {
		return nil
	}
	return os.RemoveAll(p)
}

func writeRegular(p string, r io.Reader) (int64, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// applyAttributes gives p the entry's owner, mode and extended attributes,
// never through a symbolic link.
func applyAttributes(p string, hdr *tar.Header, o UnpackOptions) error {
	if !o.Rootless {
		if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		for k, v := range hdr.PAXRecords {
			if xattr, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				// Only attributes a container may carry: not overlayfs's
				// own, which would forge whiteouts.
				if strings.HasPrefix(xattr, "trusted.overlay.") {
					continue
				}
				if err := unix.Lsetxattr(p, xattr, []byte(v), 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
					return fmt.Errorf("xattr %s: %w", xattr, err)
				}
			}
		}
	}
	if hdr.Typeflag == tar.TypeSymlink {
		return nil // a link's mode means nothing on Linux
	}
	// After the owner: chown clears the set-id bits.
	return os.Chmod(p, hdr.FileInfo().Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky))
}

func setTimes(p string, atime, mtime time.Time) error {
	if mtime.IsZero() {
		return nil
	}
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}
