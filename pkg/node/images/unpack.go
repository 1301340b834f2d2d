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
	// MinFree is the fraction of its filesystem an unpack leaves free:
	// it stops with ErrNoRoom before writing past it (0: DefaultMinFree).
	// A layer that inflates far beyond its download (a decompression
	// bomb) must not fill the disk the node, and on a server etcd, write
	// to.
	MinFree float64
}

// DefaultMinFree is the free fraction an unpack leaves its filesystem.
const DefaultMinFree = 0.05

// ErrNoRoom is an unpack stopped for want of room.
var ErrNoRoom = errors.New("unpacking the image would leave its filesystem too little free space")

// roomCheckEvery is how much content is written between two looks at the
// filesystem's free space.
const roomCheckEvery = 32 << 20

// Unpack writes the uncompressed layer tar r into dir, which must exist
// and be empty, in the layout overlayfs reads a lower directory in: a
// deleted path (".wh.name") becomes a 0/0 character device, an opaque
// directory (".wh..wh..opq") gets the trusted.overlay.opaque xattr. Every
// path is confined to dir: ".." and absolute names are cleaned into it,
// a parent that is a symbolic link is resolved inside dir, and nothing is
// followed out of it (owners, modes and times are set on the link itself).
// It returns the bytes of file content written.
func Unpack(dir string, r io.Reader, o UnpackOptions) (int64, error) {
	u := &unpacker{dir: dir, tr: tar.NewReader(r), o: o}
	for {
		hdr, err := u.tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return u.size, fmt.Errorf("reading the layer: %w", err)
		}
		if err := u.entry(hdr); err != nil {
			return u.size, err
		}
	}
	// A directory's time changes with every entry made in it: set them last.
	for i := len(u.dirs) - 1; i >= 0; i-- {
		if err := setTimes(u.dirs[i].path, u.dirs[i].atime, u.dirs[i].mtime); err != nil {
			return u.size, err
		}
	}
	return u.size, nil
}

// unpacker is one Unpack under way.
type unpacker struct {
	dir string
	tr  *tar.Reader
	o   UnpackOptions
	// size is the bytes of file content written so far; read those
	// read, sinceCheck those since the last look at the free space.
	size, read, sinceCheck int64
	// dirs are the directories made, whose times are set at the end.
	dirs []dirTimes
}

// dirTimes are a directory's times as its layer entry gives them.
type dirTimes struct {
	path         string
	atime, mtime time.Time
}

// entry unpacks one layer entry, by its kind: a whiteout, or what its
// type makes (entryKinds), then the attributes and times of what it made.
func (u *unpacker) entry(hdr *tar.Header) error {
	name := path.Clean("/" + hdr.Name)
	if name == "/" {
		return nil // the root is dir itself; its attributes are ours
	}
	parent, base := path.Split(name)
	parentPath, err := confinedDir(u.dir, parent)
	if err != nil {
		return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
	}
	switch {
	case base == whiteoutOpaque:
		return u.opaque(hdr, parentPath)
	case strings.HasPrefix(base, whiteoutPrefix):
		return u.whiteout(hdr, filepath.Join(parentPath, strings.TrimPrefix(base, whiteoutPrefix)))
	}
	target := filepath.Join(parentPath, base)
	makeEntry, ok := entryKinds[hdr.Typeflag]
	if !ok {
		return nil // global headers and other metadata-only entries
	}
	done, err := makeEntry(u, hdr, target)
	if err != nil || done {
		return err
	}
	if err := applyAttributes(target, hdr, u.o); err != nil {
		return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
	}
	if hdr.Typeflag == tar.TypeDir {
		u.dirs = append(u.dirs, dirTimes{target, hdr.AccessTime, hdr.ModTime})
	} else if err := setTimes(target, hdr.AccessTime, hdr.ModTime); err != nil {
		return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
	}
	return nil
}

// entryKinds make what a layer entry of each type is at target; done says
// that nothing more is to be set on it (a hard link, whose file carries
// the attributes; a device node left out of a rootless unpacking).
var entryKinds = map[byte]func(u *unpacker, hdr *tar.Header, target string) (done bool, err error){
	tar.TypeDir:     (*unpacker).directory,
	tar.TypeReg:     (*unpacker).regular,
	tar.TypeRegA:    (*unpacker).regular, //nolint:staticcheck // TypeRegA is what old tars write
	tar.TypeSymlink: (*unpacker).symlink,
	tar.TypeLink:    (*unpacker).hardLink,
	tar.TypeChar:    (*unpacker).device,
	tar.TypeBlock:   (*unpacker).device,
	tar.TypeFifo:    (*unpacker).device,
}

// opaque marks the parent directory opaque: it hides the lower layers'
// content of the same directory.
func (u *unpacker) opaque(hdr *tar.Header, parentPath string) error {
	if u.o.Rootless {
		return fmt.Errorf("layer entry %q: an opaque directory needs root to unpack", hdr.Name)
	}
	if err := unix.Lsetxattr(parentPath, overlayOpaque, []byte("y"), 0); err != nil {
		return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
	}
	return nil
}

// whiteout hides the path of the lower layers a deleted entry names.
func (u *unpacker) whiteout(hdr *tar.Header, hidden string) error {
	if u.o.Rootless {
		return fmt.Errorf("layer entry %q: a whiteout needs root to unpack", hdr.Name)
	}
	if err := removeExisting(hidden, false); err != nil {
		return err
	}
	if err := unix.Mknod(hidden, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("layer entry %q: whiteout: %w", hdr.Name, err)
	}
	return nil
}

// directory makes a directory, or keeps the one there.
func (u *unpacker) directory(hdr *tar.Header, target string) (bool, error) {
	if st, err := os.Lstat(target); err == nil && st.IsDir() {
		return false, nil
	}
	if err := removeExisting(target, false); err != nil {
		return false, err
	}
	if err := os.Mkdir(target, 0o700); err != nil {
		return false, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
	}
	return false, nil
}

// regular writes a file's content.
func (u *unpacker) regular(hdr *tar.Header, target string) (bool, error) {
	if err := removeExisting(target, true); err != nil {
		return false, err
	}
	n, err := writeRegular(target, &roomReader{r: u.tr, u: u})
	u.size += n
	if err != nil {
		return false, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
	}
	return false, nil
}

// symlink makes a symbolic link: its target is read inside the
// container's root, never followed here.
func (u *unpacker) symlink(hdr *tar.Header, target string) (bool, error) {
	if err := removeExisting(target, true); err != nil {
		return false, err
	}
	if err := os.Symlink(hdr.Linkname, target); err != nil {
		return false, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
	}
	return false, nil
}

// hardLink links to a file of this layer, resolved inside it.
func (u *unpacker) hardLink(hdr *tar.Header, target string) (bool, error) {
	src, err := securejoin.SecureJoin(u.dir, path.Clean("/"+hdr.Linkname))
	if err != nil {
		return true, fmt.Errorf("layer entry %q: hard link to %q: %w", hdr.Name, hdr.Linkname, err)
	}
	if st, err := os.Lstat(src); err != nil || !st.Mode().IsRegular() {
		return true, fmt.Errorf("layer entry %q: hard link to %q, which is not a file of this layer", hdr.Name, hdr.Linkname)
	}
	if err := removeExisting(target, true); err != nil {
		return true, err
	}
	if err := os.Link(src, target); err != nil {
		return true, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
	}
	return true, nil // the file it links to carries the attributes
}

// device makes a character or block device node, or a FIFO; a device
// node needs root, and rootless unpacking leaves it out.
func (u *unpacker) device(hdr *tar.Header, target string) (bool, error) {
	if u.o.Rootless && hdr.Typeflag != tar.TypeFifo {
		return true, nil
	}
	if err := removeExisting(target, true); err != nil {
		return false, err
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
		return false, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
	}
	return false, nil
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

// roomReader reads a file's content for its unpacker, stopping it when
// the filesystem is about to have less free than MinFree.
type roomReader struct {
	r io.Reader
	u *unpacker
}

func (rr *roomReader) Read(p []byte) (int, error) {
	n, err := rr.r.Read(p)
	rr.u.sinceCheck += int64(n)
	rr.u.read += int64(n)
	if rr.u.sinceCheck >= roomCheckEvery {
		rr.u.sinceCheck = 0
		if rerr := rr.u.checkRoom(); rerr != nil {
			return n, rerr
		}
	}
	return n, err
}

// checkRoom says ErrNoRoom when the unpack's filesystem has less free
// than MinFree.
func (u *unpacker) checkRoom() error {
	var fs unix.Statfs_t
	if err := unix.Statfs(u.dir, &fs); err != nil {
		return nil // not knowing is no reason to refuse an image
	}
	floor := u.o.MinFree
	if floor <= 0 {
		floor = DefaultMinFree
	}
	if total := float64(fs.Blocks) * float64(fs.Bsize); total > 0 && float64(fs.Bavail)*float64(fs.Bsize) < floor*total {
		return fmt.Errorf("%w: stopped after %d MiB of the layer's content, with %.1f%% of the filesystem free (%g%% is kept)", ErrNoRoom, u.read>>20, 100*float64(fs.Bavail)/float64(fs.Blocks), 100*floor)
	}
	return nil
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
