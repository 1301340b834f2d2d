package runc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"

	"golang.org/x/sys/unix"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// CreateSandbox implements runtime.Runtime: network (unless hostNetwork),
// IPC and UTS namespaces pinned as files under dir/ns, kept when they exist.
func (r *Runtime) CreateSandbox(id, dir, hostname string, hostNetwork bool) (*runtime.Sandbox, error) {
	nsDir := filepath.Join(dir, "ns")
	if err := os.MkdirAll(nsDir, 0o700); err != nil {
		return nil, err
	}
	s := &runtime.Sandbox{ID: id, Dir: dir, IPCNS: filepath.Join(nsDir, "ipc")}
	kinds := []string{"ipc"}
	if !hostNetwork {
		s.NetNS, s.UTSNS = filepath.Join(nsDir, "net"), filepath.Join(nsDir, "uts")
		kinds = append(kinds, "net", "uts")
	}
	missing := false
	for _, k := range kinds {
		if !isPinned(filepath.Join(nsDir, k)) {
			missing = true
		}
	}
	if !missing {
		return s, nil
	}
	_ = unpin(nsDir) // a half-made sandbox: start it again
	if err := os.MkdirAll(nsDir, 0o700); err != nil {
		return nil, err
	}
	if err := pinNamespaces(nsDir, kinds, hostname); err != nil {
		_ = unpin(nsDir)
		return nil, fmt.Errorf("pod namespaces: %w", err)
	}
	return s, nil
}

// RemoveSandbox implements runtime.Runtime.
func (r *Runtime) RemoveSandbox(s *runtime.Sandbox) error {
	return unpin(filepath.Join(s.Dir, "ns"))
}

// isPinned tells whether path is a namespace file bound there.
func isPinned(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// pinNamespaces makes new namespaces of kinds on a thread of their own and
// binds each to nsDir/<kind>, so that they live without a process. The
// thread is never given back to the Go scheduler: it dies with its goroutine.
func pinNamespaces(nsDir string, kinds []string, hostname string) error {
	flags := map[string]int{"net": unix.CLONE_NEWNET, "ipc": unix.CLONE_NEWIPC, "uts": unix.CLONE_NEWUTS}
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		var f int
		for _, k := range kinds {
			f |= flags[k]
		}
		if err := unix.Unshare(f); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		if f&unix.CLONE_NEWUTS != 0 && hostname != "" {
			if err := unix.Sethostname([]byte(hostname)); err != nil {
				errc <- fmt.Errorf("sethostname: %w", err)
				return
			}
		}
		tid := unix.Gettid()
		for _, k := range kinds {
			p := filepath.Join(nsDir, k)
			fd, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o600)
			if err != nil {
				errc <- err
				return
			}
			fd.Close()
			if err := unix.Mount(fmt.Sprintf("/proc/%d/task/%d/ns/%s", os.Getpid(), tid, k), p, "", unix.MS_BIND, ""); err != nil {
				errc <- fmt.Errorf("pinning the %s namespace: %w", k, err)
				return
			}
		}
		errc <- nil
	}()
	return <-errc
}

// unpin releases every namespace pinned in nsDir and removes it.
func unpin(nsDir string) error {
	entries, err := os.ReadDir(nsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(nsDir, e.Name())
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(nsDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
