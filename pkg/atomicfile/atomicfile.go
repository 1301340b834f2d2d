// Package atomicfile writes files so that a reader, or the next start after a
// crash, sees either the old content or the new one, never a torn mix.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFile writes data to path atomically with permissions perm: it writes a
// temporary file in the same directory, syncs it, renames it over path and
// syncs the directory so the rename itself survives a crash. The directory must
// exist. On error path is left as it was and the temporary file is removed.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return writeFile(path, bytes.NewReader(data), perm, nil)
}

// WriteFrom is WriteFile with the content read from r (copied in the kernel
// when r is a file, without holding it in memory).
func WriteFrom(path string, r io.Reader, perm os.FileMode) error {
	return writeFile(path, r, perm, nil)
}

// errCrashed stands for the process dying at a step (in tests only): nothing
// after it runs, not even the cleanup.
var errCrashed = errors.New("crashed")

// writeFile is WriteFile; crash, when not nil, is asked after every step
// whether the process dies there.
func writeFile(path string, r io.Reader, perm os.FileMode, crash func(step string) bool) (err error) {
	dies := func(step string) bool { return crash != nil && crash(step) }
	dir, tmp, err := createTemp(path)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil && err != errCrashed {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if dies("create") {
		return errCrashed
	}
	// CreateTemp makes the file 0600; set the final mode before any byte lands
	// so a secret is never readable by others, not even briefly.
	if err = tmp.Chmod(perm); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if crash != nil {
		// A part first, so that a test can crash in the middle of the content.
		if _, err = io.CopyN(tmp, r, 16); err != nil && err != io.EOF {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		if dies("half written") {
			return errCrashed
		}
	}
	if _, err = io.Copy(tmp, r); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: sync: %w", path, err)
	}
	if dies("synced") {
		return errCrashed
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if dies("renamed") {
		return errCrashed
	}
	return SyncDir(dir)
}

// Symlink points the symbolic link path at target atomically: a new link
// under a temporary name is renamed over path (a rename replaces a link in
// one step; removing and re-creating it leaves a moment without one).
func Symlink(target, path string) error {
	return symlink(target, path, nil)
}

func symlink(target, path string, crash func(step string) bool) error {
	dir, f, err := createTemp(path)
	if err != nil {
		return fmt.Errorf("linking %s: %w", path, err)
	}
	tmp := f.Name()
	_ = f.Close()
	// The name was only reserved; the link takes its place.
	if err := os.Remove(tmp); err != nil {
		return fmt.Errorf("linking %s: %w", path, err)
	}
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("linking %s: %w", path, err)
	}
	if crash != nil && crash("linked") {
		return errCrashed
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("linking %s: %w", path, err)
	}
	return SyncDir(dir)
}

// createTemp makes a hidden temporary file next to path (a rename is
// atomic only within one file system) and returns path's directory with it.
func createTemp(path string) (string, *os.File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	return dir, f, err
}

// SyncDir fsyncs directory dir, so that a rename or removal in it survives
// a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}
