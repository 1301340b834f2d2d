package controlplane

import (
	"context"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/flowcontrol"
)

// Stop stops the API server, then etcd, each with the configured grace.
func (cp *ControlPlane) Stop() {
	for _, p := range []*Process{cp.Readiness, cp.Node, cp.Scheduler, cp.ControllerManager, cp.APIServer, cp.Etcd} {
		if p == nil || p.Exited() == nil {
			continue
		}
		select {
		case <-p.Exited():
			continue
		default:
		}
		grace := cp.opts.StopGrace
		if p == cp.Node {
			// The node agent stops its pods with their grace periods (30s
			// unless set): killed sooner, it would leave them running.
			grace = max(grace, nodeStopGrace)
		}
		cp.progressf("stopping %s", p.Name)
		if !p.Stop(grace) {
			cp.progressf("%s did not stop within %v and was killed", p.Name, grace)
		}
	}
}

// Run is "steadyplane up": prepare, start etcd and the API server, print how
// to reach the cluster, restart a child that dies, and stop both when ctx ends.
func Run(ctx context.Context, o Options) error {
	cp, err := Prepare(o)
	if err != nil {
		return err
	}
	defer cp.Close()
	defer cp.Stop()
	cp.progressf("data directory %s (certificates in pki/, logs in logs/)", cp.dataDir)

	cp.progressf("starting etcd (log: %s)", cp.Etcd.LogPath)
	d, err := cp.StartEtcd(ctx)
	if err != nil {
		return err
	}
	cp.progressf("etcd ready in %.1fs (%s)", d.Seconds(), cp.etcdClientURL())

	cp.progressf("starting apiserver (log: %s)", cp.APIServer.LogPath)
	start := time.Now()
	if err := cp.StartAPIServer(); err != nil {
		return err
	}
	if err := cp.WaitAPIServerReady(ctx); err != nil {
		return err
	}
	cp.progressf("apiserver ready in %.1fs (%s)", time.Since(start).Seconds(), cp.APIServerURL())
	if cp.ControllerManager != nil {
		if err := cp.StartControllers(ctx); err != nil {
			return err
		}
	}
	if cp.Node != nil {
		cp.progressf("starting node agent %s (log: %s)", cp.opts.NodeName, cp.Node.LogPath)
		start = time.Now()
		if err := cp.Node.Start(); err != nil {
			return err
		}
		if err := cp.WaitNodeReady(ctx); err != nil {
			return err
		}
		cp.progressf("node %s ready in %.1fs (static pod manifests: %s)", cp.opts.NodeName, time.Since(start).Seconds(), filepath.Join(cp.dataDir, "manifests"))
	}
	if cp.Readiness != nil {
		cp.progressf("starting readiness-gate webhook and controller (log: %s)", cp.Readiness.LogPath)
		start = time.Now()
		if err := cp.StartReadinessController(ctx); err != nil {
			return err
		}
		cp.progressf("readiness-gate webhook ready in %.1fs (label a namespace steadyplane.io/readiness-gates to use it)", time.Since(start).Seconds())
	}
	cp.progressf("kubeconfig: %s", cp.kubeconfig)
	cp.progressf("  kubectl --kubeconfig %s get namespaces", cp.kubeconfig)
	cp.progressf("  steadyplane kubectl --kubeconfig %s get namespaces   # fails over between API servers", cp.kubeconfig)
	cp.progressf("steadyplane is up; press Ctrl-C to stop")
	return cp.supervise(ctx)
}

// supervise restarts a child that exits until ctx ends, with the kubelet's
// style of backoff (doubling from 1s to 30s, forgotten after a long healthy run).
func (cp *ControlPlane) supervise(ctx context.Context) error {
	backoff := flowcontrol.NewBackOff(time.Second, 30*time.Second)
	for {
		select {
		case <-ctx.Done():
			cp.progressf("shutting down")
			return nil
		case <-cp.Etcd.Exited():
			if err := cp.restart(ctx, cp.Etcd, backoff, cp.waitEtcd); err != nil {
				return err
			}
		case <-cp.APIServer.Exited():
			if err := cp.restart(ctx, cp.APIServer, backoff, cp.WaitAPIServerReady); err != nil {
				return err
			}
		case <-exitedOf(cp.ControllerManager):
			if err := cp.restart(ctx, cp.ControllerManager, backoff, cp.WaitControllerManagerReady); err != nil {
				return err
			}
		case <-exitedOf(cp.Scheduler):
			if err := cp.restart(ctx, cp.Scheduler, backoff, cp.WaitSchedulerReady); err != nil {
				return err
			}
		case <-exitedOf(cp.Node):
			if err := cp.restart(ctx, cp.Node, backoff, cp.WaitNodeReady); err != nil {
				return err
			}
		case <-exitedOf(cp.Readiness):
			if err := cp.restart(ctx, cp.Readiness, backoff, cp.WaitReadinessControllerReady); err != nil {
				return err
			}
		}
	}
}

// exitedOf is an optional child's exit channel, or nil (never ready) without one.
func exitedOf(p *Process) <-chan struct{} {
	if p == nil {
		return nil
	}
	return p.Exited()
}

func (cp *ControlPlane) restart(ctx context.Context, p *Process, backoff *flowcontrol.Backoff, wait func(context.Context) error) error {
	backoff.Next(p.Name, backoff.Clock.Now())
	delay := backoff.Get(p.Name)
	cp.progressf("%s exited unexpectedly (%v); restarting in %v. Last lines of %s:\n%s", p.Name, p.Err(), delay, p.LogPath, p.LogTail(10))
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(delay):
	}
	if err := p.Start(); err != nil {
		return err
	}
	if err := wait(ctx); err != nil {
		cp.progressf("%s did not become ready after restart: %v", p.Name, err)
		return nil // its exit, if it comes, is handled by the next loop turn
	}
	cp.progressf("%s ready again", p.Name)
	return nil
}
