package crilog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults of log rotation: the kubelet's --container-log-max-size and
// --container-log-max-files.
const (
	DefaultMaxSize  = 10 << 20
	DefaultMaxFiles = 5
)

// Rotating is a log file that is rotated once it would grow past MaxSize:
// the file is renamed to <path>.<UTC time> and a new one begun at path, as
// the kubelet's log manager does, so that upstream's log reader following
// it reopens the new file. At most MaxFiles files are kept, the current one
// included; the oldest go first. Writes are records, never split between
// files.
type Rotating struct {
	path     string
	maxSize  int64
	maxFiles int
	now      func() time.Time

	mu   sync.Mutex
	f    *os.File
	size int64
}

// OpenRotating opens (appending to) or creates the log at path.
func OpenRotating(path string, maxSize int64, maxFiles int) (*Rotating, error) {
	if maxSize <= 0 || maxFiles < 1 {
		return nil, fmt.Errorf("log rotation: max size %d and max files %d must be positive", maxSize, maxFiles)
	}
	r := &Rotating{path: path, maxSize: maxSize, maxFiles: maxFiles, now: time.Now}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Rotating) open() error {
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	r.f, r.size = f, st.Size()
	return nil
}

// Write appends p, first rotating when p would take the file past its size.
func (r *Rotating) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return 0, os.ErrClosed
	}
	if r.size > 0 && r.size+int64(len(p)) > r.maxSize {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

func (r *Rotating) rotate() error {
	if err := r.f.Close(); err != nil {
		return err
	}
	r.f = nil
	if err := RotateFile(r.path, r.now()); err != nil {
		return err
	}
	if err := r.open(); err != nil {
		return err
	}
	return PruneRotated(r.path, r.maxFiles-1)
}

// RotateFile renames the log at path to its rotated name for time now,
// <path>.<UTC time>: the names Rotated finds, oldest first, and the
// kubelet's log manager's. Whoever writes the log must then open path
// afresh.
func RotateFile(path string, now time.Time) error {
	return os.Rename(path, path+"."+now.UTC().Format("20060102-150405.000000000"))
}

// Close closes the current file.
func (r *Rotating) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// Rotated returns the rotated files of the log at path, oldest first.
func Rotated(path string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	prefix := filepath.Base(path) + "."
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, filepath.Join(filepath.Dir(path), e.Name()))
		}
	}
	slices.Sort(out) // the times sort as text
	return out, nil
}

// PruneRotated removes the oldest rotated files of the log at path until
// at most keep are left.
func PruneRotated(path string, keep int) error {
	files, err := Rotated(path)
	if err != nil {
		return err
	}
	var errs []error
	for len(files) > keep {
		if err := os.Remove(files[0]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		files = files[1:]
	}
	return errors.Join(errs...)
}
