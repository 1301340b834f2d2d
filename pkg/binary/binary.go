// Package binary keeps the steadyplane executable in a data directory by
// its content, as k3s unpacks its binaries into its data directory: static
// pods, the node agent and the images of the binary (CoreDNS's) name that
// copy, which outlives "go run"'s temporary one, and a new build gets a new
// name, so that a manifest changes exactly when its binary does. Every
// process of a node then runs one file, whose pages the kernel keeps once.
package binary

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

// Prefix starts the name of every installed copy: steadyplane-<hash>.
const Prefix = "steadyplane-"

// Mode is an installed copy's mode: executable by anyone who may enter the
// data directory (0700), so that an image can share the file.
const Mode = 0o755

// ImagePath is where the image of the binary (ImageRef) holds it.
const ImagePath = "/usr/local/bin/steadyplane"

// ImageRef names the image of an installed copy (Install's path) that pods
// run the binary from, CoreDNS's first: steadyplane.io/steadyplane:<hash>,
// the same on every node of one build.
func ImageRef(installed string) string {
	return "steadyplane.io/steadyplane:" + strings.TrimPrefix(filepath.Base(installed), Prefix)
}

// Install copies the executable at src into dir as steadyplane-<hash>
// (the first 12 hex digits of its SHA-256), unless that copy exists, and
// returns its path. The hash of a source already seen (same file, size and
// modification time) is taken from dir's record instead of read again: a
// start of "up" would otherwise read the whole binary (a quarter of a
// second) to learn what it knew.
func Install(src, dir string) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	seen := identify(st)
	rec := readRecord(dir)
	if name, ok := rec[src]; ok && name.Source == seen {
		dst := filepath.Join(dir, name.Name)
		if ist, err := os.Stat(dst); err == nil && ist.Size() == st.Size() {
			return dst, ensureMode(dst, ist)
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", src, err)
	}
	name := Prefix + hex.EncodeToString(h.Sum(nil))[:12]
	dst := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if ist, err := os.Stat(dst); err != nil {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return "", err
		}
		if err := atomicfile.WriteFrom(dst, f, Mode); err != nil {
			return "", err
		}
	} else if err := ensureMode(dst, ist); err != nil {
		return "", err
	}
	rec[src] = installed{Name: name, Source: seen}
	// The copy is a source too: up runs from it (and hashes nothing).
	if ist, err := os.Stat(dst); err == nil {
		rec[dst] = installed{Name: name, Source: identify(ist)}
	}
	// The record only saves time: a failure to write it costs the next
	// start a hash, nothing else.
	if b, err := json.Marshal(rec); err == nil {
		_ = atomicfile.WriteFile(filepath.Join(dir, recordFile), b, 0o600)
	}
	return dst, nil
}

// ensureMode gives a copy an earlier release installed 0700 the mode Mode.
func ensureMode(path string, st os.FileInfo) error {
	if st.Mode().Perm() == Mode {
		return nil
	}
	return os.Chmod(path, Mode)
}

// recordFile is where Install keeps what it hashed: by source path, the
// copy's name and the source as it was then.
const recordFile = ".installed.json"

type installed struct {
	Name   string    `json:"name"`
	Source fileIdent `json:"source"`
}

// fileIdent is what tells that a file is the one hashed before: a file
// replaced (by a build, a copy or a package) has another inode or another
// modification time.
type fileIdent struct {
	Dev, Ino   uint64
	Size       int64
	MtimeNanos int64
}

func identify(st os.FileInfo) fileIdent {
	id := fileIdent{Size: st.Size(), MtimeNanos: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		id.Dev, id.Ino = uint64(sys.Dev), sys.Ino
	}
	return id
}

func readRecord(dir string) map[string]installed {
	rec := map[string]installed{}
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return rec
	}
	if json.Unmarshal(b, &rec) != nil {
		return map[string]installed{}
	}
	return rec
}

// Digest is "sha256:<hex>" of the file at path: a release is named by it
// wherever it is copied.
func Digest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// ParseDigest returns the hex of a "sha256:<64 hex>" digest.
func ParseDigest(digest string) (string, error) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != sha256.Size*2 || strings.Trim(h, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%q is no digest: want sha256: and 64 lowercase hex digits", digest)
	}
	return h, nil
}

// Find is the copy Install made in dir of the binary with digest, checked
// by its content; an error wrapping fs.ErrNotExist when dir has none.
func Find(dir, digest string) (string, error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, Prefix+h[:12])
	got, err := cachedDigest(path)
	if err != nil {
		return "", err
	}
	if got != digest {
		return "", fmt.Errorf("%s is %s, not %s: %w", path, got, digest, fs.ErrNotExist)
	}
	return path, nil
}

// MaxSize bounds a binary received from another host (steadyplane's is
// about a quarter of it): a sender cannot fill the disk before the digest
// is checked.
const MaxSize = 1 << 30

// ErrRefused wraps Receive's refusals of what it was sent (too large, not
// the digest, a name another binary holds), as opposed to failures to
// write it.
var ErrRefused = errors.New("refused")

// Receive writes the binary read from body into dir as Install would name
// it, and returns its path, if its content is digest; nothing is left
// otherwise, and a copy another binary holds under that name is not
// replaced. body is read up to MaxSize.
func Receive(body io.Reader, dir, digest string) (string, error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".receive-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, sum), io.LimitReader(body, MaxSize+1))
	if err == nil && n > MaxSize {
		err = fmt.Errorf("%w: the binary is over %d bytes: not installed", ErrRefused, int64(MaxSize))
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != h {
		return "", fmt.Errorf("%w: the binary is sha256:%s, not %s: not installed", ErrRefused, got, digest)
	}
	if err := os.Chmod(tmp.Name(), Mode); err != nil {
		return "", err
	}
	// A link, not a rename: the name (12 hex digits of the digest) may
	// hold a copy already, maybe the one that runs.
	path := filepath.Join(dir, Prefix+h[:12])
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		if d, derr := Digest(path); derr == nil && d == digest {
			return path, nil
		}
		return "", fmt.Errorf("%w: %s holds another binary; not replaced", ErrRefused, path)
	} else if err != nil {
		return "", err
	}
	return path, nil
}

// digests caches Digest by file identity: a node serving a release to
// the others reads a quarter of a gigabyte once, not once per request.
var digests sync.Map // fileIdent+path -> string

// cachedDigest is Digest of path, read again only when the file changed.
func cachedDigest(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s %+v", path, identify(st))
	if d, ok := digests.Load(key); ok {
		return d.(string), nil
	}
	d, err := Digest(path)
	if err == nil {
		digests.Store(key, d)
	}
	return d, err
}
