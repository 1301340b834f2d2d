package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

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

// releaseUp records that this up, the first start of a move's target, is
// up: the move is done.
func (cp *ControlPlane) releaseUp() { release.MarkUp(string(cp.dir), cp.progressf) }

// releaseStartFailed handles err, which ended this up's start: when this
// up is a move's first start, the previous binary takes the data
// directory back (handOver, which returns only on failure). Otherwise it
// returns err.
func (cp *ControlPlane) releaseStartFailed(ctx context.Context, err error) error {
	return release.HandBack(string(cp.dir), err, cp.progressf, func(binary string) error { return cp.handOver(ctx, binary) })
}

// releasePrepareFailed is releaseStartFailed for an up that failed before
// it started anything: the previous binary is exec'd at once.
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
	return release.HandBack(dir, err, progress, func(binary string) error {
		return syscall.Exec(binary, os.Args, os.Environ())
	})
}

// releaseRequested is the binary a pending move asks this up to hand over
// to, or "".
func (cp *ControlPlane) releaseRequested() string {
	if !cp.staticPods {
		release.Unsupported(string(cp.dir), "up runs its control plane as child processes (--static-pods=false, or no runc): stop it and start the new binary's up by hand", cp.progressf)
		return ""
	}
	target := release.Requested(string(cp.dir), cp.progressf)
	if target != "" {
		cp.progressf("moving to another release: the control plane stops, the workloads keep running")
	}
	return target
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
func (cp *ControlPlane) releaseRequeue() { release.RequeueStopped(string(cp.dir), cp.progressf) }

// followRelease runs this server's side of the cluster's release rollout
// (release.Follower) until ctx ends: the operator asks the servers to move
// one at a time through their Nodes, and this up's supervision hands over
// once the binary is installed and the move asked for.
func (cp *ControlPlane) followRelease(ctx context.Context) {
	if !cp.staticPods || cp.nodeKubeconfig == "" {
		return
	}
	client, err := cp.adminClient()
	if err != nil {
		cp.progressf("release: %v; this server does not follow the cluster's release", err)
		return
	}
	peer, err := clientcmd.BuildConfigFromFlags("", cp.nodeKubeconfig)
	if err != nil {
		cp.progressf("release: %v; this server does not follow the cluster's release", err)
		return
	}
	// Workers have no copy of the node API's CA: the servers publish it
	// (until it is written: an API server may be restarting).
	for {
		err := release.PublishNodeAPICA(ctx, client, cp.pki.KubeletCA.CertPEM)
		if err == nil {
			break
		}
		cp.progressf("release: publishing the node API's CA: %v (trying again)", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
	f := &release.Follower{Client: client, NodeName: cp.opts.NodeName, DataDir: string(cp.dir), Peer: peer, Progress: cp.progressf}
	f.Run(ctx)
}
