package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/steadyplane/steadyplane/pkg/buildinfo"
	"github.com/steadyplane/steadyplane/pkg/fallback/release"
)

// The data directory's release (package release): which binary runs it,
// and a move to another one. A server moves by handing over: its control
// plane stops, its workloads keep running, and this process becomes the
// other binary's up (exec keeps the pid, which marks the attempt). The
// new up adopts the pods; if it cannot start, it puts the previous
// binary back the same way, and if it dies, the next start of up (by a
// service manager or by hand) finds the attempt gone and runs the
// previous binary (release.Start).

// exists says a file is there.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// thisBinary is the binary this up runs, as the release state names it.
func thisBinary() (release.Binary, error) {
	path, err := os.Executable()
	if err != nil {
		return release.Binary{}, err
	}
	return release.Binary{Path: path, Release: buildinfo.Get().Release}, nil
}

// chooseRelease is runFromDataDir's choice of the binary to run, with
// installed (this binary's copy) as self: release.Start on the data
// directory's state, written back when it changes.
func chooseRelease(dataDir, installed string, progress func(format string, args ...any)) (string, error) {
	st, err := release.ReadState(dataDir)
	if err != nil {
		// A torn or edited file must not keep the server down: set
		// aside, it starts this binary as on a new data directory.
		bad := filepath.Join(dataDir, release.StateFile+".bad")
		if rerr := os.Rename(filepath.Join(dataDir, release.StateFile), bad); rerr != nil {
			return "", err
		}
		progress("WARNING: %v; set aside as %s, running this binary", err, bad)
		st = nil
	}
	d := release.Start(st, release.Binary{Path: installed, Release: buildinfo.Get().Release}, release.Me(), exists, release.Alive)
	if d.Write != nil {
		if err := release.WriteState(dataDir, d.Write); err != nil {
			return "", err
		}
	}
	if d.Note != "" {
		progress("%s", d.Note)
	}
	return d.Run.Path, nil
}

// releaseUp records that this up, the first start of a move's target, is
// up: the move is done.
func (cp *ControlPlane) releaseUp() {
	me, err := thisBinary()
	if err != nil {
		return
	}
	st, err := release.ReadState(string(cp.dir))
	if err != nil {
		cp.progressf("release state: %v", err)
		return
	}
	if next := release.Up(st, me, release.Me()); next != nil {
		if err := release.WriteState(string(cp.dir), next); err != nil {
			cp.progressf("release state: %v", err)
			return
		}
		cp.progressf("release %s is up (moved from %s; steadyplane upgrade --rollback goes back)", me.Release, next.Previous.Release)
	}
}

// releaseStartFailed handles err, which ended this up's start: when this
// up is a move's first start, the move failed, and the previous binary
// takes the data directory back (handOver, which returns only on failure).
// Otherwise it returns err.
func (cp *ControlPlane) releaseStartFailed(ctx context.Context, err error) error {
	return releaseFailed(string(cp.dir), err, cp.progressf, func(binary string) error { return cp.handOver(ctx, binary) })
}

// releaseFailed records err as the failure of the move this up starts, if
// it is one, and hands back to the previous binary with handBack.
func releaseFailed(dir string, err error, progress func(format string, args ...any), handBack func(binary string) error) error {
	me, serr := thisBinary()
	if serr != nil {
		return err
	}
	st, rerr := release.ReadState(dir)
	if rerr != nil {
		return err
	}
	next := release.StartFailed(st, me, release.Me(), err)
	if next == nil || !exists(next.Current.Path) {
		return err
	}
	if werr := release.WriteState(dir, next); werr != nil {
		return fmt.Errorf("%w (and recording the failed move: %v)", err, werr)
	}
	progress("release %s could not start (%v); handing back to %s", me.Release, err, next.Current.Release)
	return handBack(next.Current.Path)
}

// releasePrepareFailed is releaseFailed for an up that failed before it
// started anything: the previous binary is exec'd at once.
func releasePrepareFailed(o Options, err error) error {
	dir, aerr := filepath.Abs(o.DataDir)
	if aerr != nil {
		return err
	}
	if d, lerr := filepath.EvalSymlinks(dir); lerr == nil {
		dir = d
	}
	progress := func(format string, args ...any) {
		if o.Out != nil {
			fmt.Fprintf(o.Out, format+"\n", args...)
		}
	}
	return releaseFailed(dir, err, progress, func(binary string) error {
		return syscall.Exec(binary, os.Args, os.Environ())
	})
}

// releaseRequested is the binary a pending move asks this up to hand over
// to, or "".
func (cp *ControlPlane) releaseRequested() string {
	st, err := release.ReadState(string(cp.dir))
	if err != nil || st == nil || st.Phase != release.Pending || st.Target == nil || !exists(st.Target.Path) {
		return ""
	}
	if me, err := thisBinary(); err == nil && me.Path == st.Target.Path {
		return ""
	}
	if !cp.staticPods {
		next := *st
		next.Phase, next.Reason = release.Failed, release.ReasonUnsupported
		next.Message = "up runs its control plane as child processes (--static-pods=false, or no runc): stop it and start the new binary's up by hand"
		_ = release.WriteState(string(cp.dir), &next)
		cp.progressf("release %s: %s", st.Target.Release, next.Message)
		return ""
	}
	// Marked before the exec: the target's up (this pid) is the attempt.
	next := *st
	next.Phase, next.StartedBy, next.Reason, next.Message = release.Starting, release.Me(), "", ""
	if err := release.WriteState(string(cp.dir), &next); err != nil {
		cp.progressf("release state: %v", err)
		return ""
	}
	cp.progressf("moving to release %s: the control plane stops, the workloads keep running", st.Target.Release)
	return st.Target.Path
}

// handOver stops the control plane, leaves the workloads running, and
// replaces this process with binary's up, given the same arguments. Asked
// to stop meanwhile (ctx), it does not: a move it marked is asked for
// again.
func (cp *ControlPlane) handOver(ctx context.Context, binary string) error {
	if l, ok := cp.launcher.(staticPodLauncher); ok {
		l.stop(stopOrder(), true)
	} else {
		cp.Stop()
	}
	if ctx.Err() != nil {
		cp.releaseRequeue()
		return nil
	}
	cp.Close()
	return syscall.Exec(binary, os.Args, os.Environ())
}

// releaseRequeue asks again for a move this up marked Starting and did
// not finish: it was stopped.
func (cp *ControlPlane) releaseRequeue() {
	st, err := release.ReadState(string(cp.dir))
	if err != nil {
		return
	}
	if next := release.Requeue(st, release.Me()); next != nil {
		if err := release.WriteState(string(cp.dir), next); err == nil {
			cp.progressf("the move to release %s was stopped before it was up; the next up starts it again", next.Target.Release)
		}
	}
}
