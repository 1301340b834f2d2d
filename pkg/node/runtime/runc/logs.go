package runc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
)

// A container's log is rotated by the agent, as the kubelet's log manager
// does for CRI-O: once the log reaches LogMaxSize it is renamed to its
// rotated name and conmon told to reopen it (the REOPEN_LOGS_EVENT of its
// control FIFO); the oldest rotated files go beyond LogMaxFiles. The agent
// learns of writes from inotify, so that a container writing as fast as it
// can is rotated close to the size rather than at the next tick of a clock;
// a slow tick backs it up (inotify drops events when its queue overflows).
//
// conmon's own cap (--log-size-max) is not used: in conmon 2.1.6 (Debian
// 12) the count of bytes it caps is not reset when the log is reopened, so
// the cap would start a freshly rotated log over and lose its lines. As with
// the kubelet and containerd, a log grows unrotated while no agent runs.

// reopenLogsMessage is conmon's control message that reopens the log.
const reopenLogsMessage = "2 0 0\n"

// logRotator rotates the logs of the runtime's running containers.
type logRotator struct {
	maxSize  int64
	maxFiles int
	every    time.Duration

	once    sync.Once
	watcher *fsnotify.Watcher // nil when inotify is unavailable: the tick alone

	mu   sync.Mutex
	logs map[string]string // log path -> conmon's control FIFO
	dirs map[string]int    // watched directory -> logs in it
}

func newLogRotator(maxSize int64, maxFiles int, every time.Duration) *logRotator {
	return &logRotator{maxSize: maxSize, maxFiles: maxFiles, every: every, logs: map[string]string{}, dirs: map[string]int{}}
}

// start begins watching, once: one inotify instance for every container
// (the per-user limit of instances is 128 by default).
func (l *logRotator) start() {
	l.once.Do(func() {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			klog.ErrorS(err, "Watching container logs for rotation; checking them every tick instead", "every", l.every)
		} else {
			l.watcher = w
			go l.events()
		}
		go l.ticks()
	})
}

// watch rotates the log at logPath, written by the conmon whose control
// FIFO is ctl, until the returned function is called.
func (l *logRotator) watch(logPath, ctl string) (stop func()) {
	if logPath == "" {
		return func() {}
	}
	l.start()
	dir := filepath.Dir(logPath)
	l.mu.Lock()
	l.logs[logPath] = ctl
	if l.dirs[dir]++; l.dirs[dir] == 1 && l.watcher != nil {
		if err := l.watcher.Add(dir); err != nil {
			klog.ErrorS(err, "Watching a container's log for rotation", "log", logPath)
		}
	}
	l.mu.Unlock()
	l.check(logPath)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.logs, logPath)
		if l.dirs[dir]--; l.dirs[dir] == 0 {
			delete(l.dirs, dir)
			if l.watcher != nil {
				_ = l.watcher.Remove(dir)
			}
		}
	}
}

func (l *logRotator) events() {
	for {
		select {
		case ev, ok := <-l.watcher.Events:
			if !ok {
				return
			}
			if ev.Has(fsnotify.Write) {
				l.check(ev.Name)
			}
		case err, ok := <-l.watcher.Errors:
			if !ok {
				return
			}
			klog.V(2).InfoS("Watching container logs", "err", err)
		}
	}
}

func (l *logRotator) ticks() {
	for range time.Tick(l.every) {
		l.mu.Lock()
		paths := make([]string, 0, len(l.logs))
		for p := range l.logs {
			paths = append(paths, p)
		}
		l.mu.Unlock()
		for _, p := range paths {
			l.check(p)
		}
	}
}

// check rotates the log at path if it is one of ours and has reached the
// size.
func (l *logRotator) check(path string) {
	l.mu.Lock()
	ctl, ok := l.logs[path]
	l.mu.Unlock()
	if !ok {
		return
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() < l.maxSize {
		return
	}
	if err := rotateLog(path, ctl, l.maxFiles, time.Now()); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "Rotating a container's log", "log", path)
	}
}

// rotateLog renames the log, has conmon (its control FIFO at ctl) write a
// new one, and keeps at most maxFiles files, the new one included.
func rotateLog(logPath, ctl string, maxFiles int, now time.Time) error {
	if err := crilog.RotateFile(logPath, now); err != nil {
		return err
	}
	// A monitor that has just ended (ENXIO) has nothing to reopen.
	err := writeControl(ctl, reopenLogsMessage)
	var errs []error
	if err != nil && !errors.Is(err, syscall.ENXIO) && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("asking conmon to reopen the log: %w", err))
	}
	if err := crilog.PruneRotated(logPath, maxFiles-1); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
