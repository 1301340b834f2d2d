package release

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/steadyplane/steadyplane/pkg/buildinfo"
)

// What a node's process (up on a server, node on a worker) does with its
// directory's release: choose the binary at its start, mark the move done
// once it is up, hand back when it cannot start, and look for a move
// asked of it while it runs. Each is a step of the State machine (Start,
// Up, StartFailed, Requeue) with its file read and written.

// Progress receives a line for the user.
type Progress func(format string, args ...any)

// exists says a file is there.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Self is the binary this process runs, as the State names it.
func Self() (Binary, error) {
	path, err := os.Executable()
	if err != nil {
		return Binary{}, err
	}
	return Binary{Path: path, Release: buildinfo.Get().Release}, nil
}

// Choose is the binary to run dir with at a start, installed (this
// binary's copy) being self: Start on dir's State, written back when it
// changes. A torn or edited State must not keep the node down: it is set
// aside, and this binary runs as on a new directory.
func Choose(dir, installed string, progress Progress) (string, error) {
	st, err := ReadState(dir)
	if err != nil {
		bad := filepath.Join(dir, StateFile+".bad")
		if rerr := os.Rename(filepath.Join(dir, StateFile), bad); rerr != nil {
			return "", err
		}
		progress("WARNING: %v; set aside as %s, running this binary", err, bad)
		st = nil
	}
	d := Start(st, Binary{Path: installed, Release: buildinfo.Get().Release}, Me(), exists, Alive)
	if d.Write != nil {
		if err := WriteState(dir, d.Write); err != nil {
			return "", err
		}
	}
	if d.Note != "" {
		progress("%s", d.Note)
	}
	return d.Run.Path, nil
}

// MarkUp records that this process, if it is the first start of a move's
// target, is up: the move is done.
func MarkUp(dir string, progress Progress) {
	me, err := Self()
	if err != nil {
		return
	}
	st, err := ReadState(dir)
	if err != nil {
		progress("release state: %v", err)
		return
	}
	if next := Up(st, me, Me()); next != nil {
		if err := WriteState(dir, next); err != nil {
			progress("release state: %v", err)
			return
		}
		progress("release %s is up (moved from %s; steadyplane upgrade --rollback goes back)", me.Release, next.Previous.Release)
	}
}

// HandBack handles err, which ended this process's start: when it is a
// move's first start, the move failed, and the previous binary takes the
// directory back through handBack (which returns only when it could not).
// Otherwise it returns err.
func HandBack(dir string, err error, progress Progress, handBack func(binary string) error) error {
	me, serr := Self()
	if serr != nil {
		return err
	}
	st, rerr := ReadState(dir)
	if rerr != nil {
		return err
	}
	next := StartFailed(st, me, Me(), err)
	if next == nil || !exists(next.Current.Path) {
		return err
	}
	if werr := WriteState(dir, next); werr != nil {
		return fmt.Errorf("%w (and recording the failed move: %v)", err, werr)
	}
	progress("release %s could not start (%v); handing back to %s", me.Release, err, next.Current.Release)
	return handBack(next.Current.Path)
}

// Requested is the binary a Pending move asks this process to hand over
// to, marked Starting by it (the exec keeps the pid, which names the
// attempt), or "".
func Requested(dir string, progress Progress) string {
	st, err := ReadState(dir)
	if err != nil || st == nil || st.Phase != Pending || st.Target == nil || !exists(st.Target.Path) {
		return ""
	}
	if me, err := Self(); err == nil && me.Path == st.Target.Path {
		return ""
	}
	if err := WriteState(dir, st.to(Starting, Me(), "", "")); err != nil {
		progress("release state: %v", err)
		return ""
	}
	return st.Target.Path
}

// Unsupported answers a Pending move this process cannot make; it says
// why in the State.
func Unsupported(dir, why string, progress Progress) {
	st, err := ReadState(dir)
	if err != nil || st == nil || st.Phase != Pending || st.Target == nil {
		return
	}
	Fail(dir, ReasonUnsupported, why, progress)
}

// Fail records that the move asked for (Pending, or Starting by this
// process) failed for reason, and why; this process's binary stays.
func Fail(dir, reason, why string, progress Progress) {
	st, err := ReadState(dir)
	if err != nil || st == nil || st.Target == nil || !(st.Phase == Pending || st.Phase == Starting && st.StartedBy == Me()) {
		return
	}
	if err := WriteState(dir, st.to(Failed, Process{}, reason, why)); err != nil {
		progress("release state: %v", err)
		return
	}
	progress("release %s: %s", st.Target.Release, why)
}

// RequeueStopped asks again for a move this process marked Starting and
// did not finish: it was stopped.
func RequeueStopped(dir string, progress Progress) {
	st, err := ReadState(dir)
	if err != nil {
		return
	}
	if next := Requeue(st, Me()); next != nil {
		if err := WriteState(dir, next); err == nil {
			progress("the move to release %s was stopped before it was up; the next start moves again", next.Target.Release)
		}
	}
}
