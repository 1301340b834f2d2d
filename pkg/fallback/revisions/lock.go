package revisions

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Lock takes the installer lock: the installer holds it while it writes a
// revision's files and manifests, the startup monitor while it looks and
// falls back, so that a fallback never overwrites a manifest an installer
// just wrote. It is an flock on the lock file, released by the kernel when
// the holder dies (a killed installer does not wedge the node). Lock waits
// until it has the lock or ctx ends.
func (l Layout) Lock(ctx context.Context) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(l.LockPath), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(l.LockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", l.LockPath, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for %s: %w", l.LockPath, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
