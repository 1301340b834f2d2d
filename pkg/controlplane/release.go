package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/pkg/fallback/monitor"
	"github.com/steadyplane/steadyplane/pkg/fallback/release"
	"github.com/steadyplane/steadyplane/pkg/node/localstatus"
	"github.com/steadyplane/steadyplane/pkg/node/podworker"
)

// The data directory's release (package release): which binary runs it,
// and a move to another one. A server moves by handing over: its control
// plane stops, its workloads keep running, and this process becomes the
// other binary's up (exec keeps the pid, which marks the attempt). The
// new up adopts the pods; if it cannot start, it puts the previous
// binary back the same way, and if it dies, the next start of up (by a
// service manager or by hand) finds the attempt gone and runs the
// previous binary (release.Start).

// releaseUp is called once this up is up. The first start of a move's
// target settles before the move is done (release.Settle, stepped by
// supervise through releaseSettleStep): it watches the control plane's
// static pods through the node agent's loopback endpoint. A control plane
// of child processes is watched by up itself: its move is done at once.
func (cp *ControlPlane) releaseUp(ctx context.Context) {
	dir := string(cp.dir)
	if !release.FirstStart(dir) {
		return
	}
	if !cp.staticPods || cp.opts.NodeMetricsPort == 0 {
		release.MarkUp(dir, cp.progressf)
		return
	}
	agent := monitor.AgentEndpoint{URL: "http://127.0.0.1:" + strconv.Itoa(cp.opts.NodeMetricsPort), Client: http.DefaultClient}
	cp.settle = &release.Settle{Window: release.SettleWindow, Now: time.Now, Observe: func(ctx context.Context) ([]release.ComponentRun, error) {
		pods, err := agent.Pods(ctx)
		return componentRuns(pods), err
	}}
	// The first look is the restarts' baseline: taken now, a component
	// that crashes from here on counts.
	_, _ = cp.settle.Step(ctx)
	release.MarkSettling(dir, cp.progressf)
	cp.progressf("the new release is up; it settles for %v (a component restarting %d times in it sends this server back)", release.SettleWindow, release.CrashLoopRestarts)
}

// releaseSettleStep takes the settling move's next look (every
// releasePoll): the move is done once it settled, and a crash loop hands
// the data directory back to the release before (as a start that failed,
// which returns only when it could not).
func (cp *ControlPlane) releaseSettleStep(ctx context.Context) error {
	if cp.settle == nil {
		return nil
	}
	done, err := cp.settle.Step(ctx)
	switch {
	case err != nil:
		cp.settle = nil
		return cp.releaseStartFailed(ctx, err)
	case done:
		cp.settle = nil
		release.MarkUp(string(cp.dir), cp.progressf)
	}
	return nil
}

// componentRuns are the static pods among the node agent's pods: the
// control plane's components.
func componentRuns(pods []localstatus.Pod) []release.ComponentRun {
	var out []release.ComponentRun
	for _, p := range pods {
		if !p.Static {
			continue
		}
		r := release.ComponentRun{Name: p.Name, UID: string(p.UID)}
		for _, cs := range p.Status.ContainerStatuses {
			r.Restarts += cs.RestartCount
			r.BackingOff = r.BackingOff || cs.State.Waiting != nil && cs.State.Waiting.Reason == podworker.ReasonCrashLoopBackOff
			if t := cs.LastTerminationState.Terminated; t != nil {
				r.LastEnd = monitor.DescribeEnd(t)
			}
		}
		out = append(out, r)
	}
	return out
}

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
