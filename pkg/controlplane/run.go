package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/steadyplane/steadyplane/pkg/procfs"

	"k8s.io/client-go/util/flowcontrol"
)

// Stop stops what runs, in reverse order, each with the configured grace:
// the readiness controller, then (as static pods) the controllers and the
// API server, then the node agent with its pods and etcd; or, as child
// processes, the node agent, the controllers, the API server and etcd.
func (cp *ControlPlane) Stop() {
	for _, p := range []*Process{cp.Readiness, cp.Node, cp.Scheduler, cp.ControllerManager, cp.APIServer, cp.Etcd} {
		if p == nil || p.Exited() == nil {
			continue
		}
		if p == cp.Node && cp.staticPods {
			// The controllers hand their leases back while the API server
			// still answers, and the API server goes before etcd.
			cp.stopStaticPods(readinessPod, operatorPod, "kube-scheduler", "kube-controller-manager")
			// A startup monitor would see its revision go and wait; it goes
			// first all the same. The next "up" starts last-known-good.
			_ = os.Remove(cp.apiserverLayout().MonitorManifest())
			cp.stopStaticPods("kube-apiserver")
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

// Run is "steadyplane up": prepare, run the control plane, print how to
// reach the cluster, restart what dies, and stop everything when ctx ends.
// With runc on this node the control plane runs as static pods on the node
// agent, as kubeadm and the kubelet do: the agent runs and restarts them,
// with no API server needed. Without runc (host processes cannot mount their
// files) "up" runs each component as its own child process instead.
func Run(ctx context.Context, o Options) error {
	cp, err := Prepare(o)
	if err != nil {
		return err
	}
	defer cp.Close()
	defer cp.Stop()
	cp.progressf("data directory %s (certificates in pki/, logs in logs/)", cp.dataDir)
	cp.staticPods = cp.opts.StaticPods && cp.Node != nil && cp.nodeRuntime == "runc"
	if cp.staticPods {
		err = cp.runStaticPods(ctx)
	} else {
		err = cp.runProcesses(ctx)
	}
	if err != nil {
		return err
	}
	if cp.Readiness != nil {
		if cp.staticPods {
			cp.progressf("starting readiness-gate webhook and controller (static pod %s)", readinessPod)
		} else {
			cp.progressf("starting readiness-gate webhook and controller (log: %s)", cp.Readiness.LogPath)
		}
		start := time.Now()
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

// runStaticPods writes the control plane's static pods (running a copy of
// the binary kept in the data directory), starts the node agent and waits
// for each component in turn.
func (cp *ControlPlane) runStaticPods(ctx context.Context) error {
	bin, err := InstallBinary(cp.opts.Binary, filepath.Join(cp.dataDir, "bin"))
	if err != nil {
		return fmt.Errorf("installing the binary for the static pods: %w", err)
	}
	cp.bin = bin
	manifests := filepath.Join(cp.dataDir, "manifests")
	// The last run's controllers must not start before the API server
	// either (nor at all, if they are switched off now).
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", readinessPod, operatorPod} {
		if err := os.Remove(filepath.Join(manifests, name+".yaml")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	// etcd and the API server first; the controllers once the API server
	// answers, so that they do not crash-loop (and back off) meanwhile.
	if cp.fallbackOn() {
		if err := cp.writeManifests("etcd"); err != nil {
			return err
		}
		if err := cp.installAPIServer(ctx); err != nil {
			return fmt.Errorf("installing the API server's revision: %w", err)
		}
	} else {
		if err := os.Remove(cp.apiserverLayout().MonitorManifest()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := cp.writeManifests("etcd", "kube-apiserver"); err != nil {
			return err
		}
	}
	cp.progressf("control plane: static pods in %s, run by the node agent (kubectl logs -n kube-system ...)", manifests)
	cp.progressf("starting node agent %s (log: %s)", cp.opts.NodeName, cp.Node.LogPath)
	start := time.Now()
	if err := cp.Node.Start(); err != nil {
		return err
	}
	if err := cp.waitEtcd(ctx); err != nil {
		return err
	}
	cp.progressf("etcd ready in %.1fs (%s)", time.Since(start).Seconds(), cp.etcdClientURL())
	if err := cp.WaitAPIServerReady(ctx); err != nil {
		return err
	}
	cp.progressf("apiserver ready in %.1fs (%s)", time.Since(start).Seconds(), cp.APIServerURL())
	if cp.ControllerManager != nil {
		if err := cp.writeManifests("kube-controller-manager", "kube-scheduler"); err != nil {
			return err
		}
		if err := cp.StartControllers(ctx); err != nil {
			return err
		}
	}
	if err := cp.WaitNodeReady(ctx); err != nil {
		return err
	}
	cp.progressf("node %s ready in %.1fs", cp.opts.NodeName, time.Since(start).Seconds())
	if cp.fallbackOn() {
		return cp.startFallback(ctx)
	}
	return nil
}

// runProcesses starts etcd, the API server, the controllers and the node
// agent as child processes, each once the one before is ready.
func (cp *ControlPlane) runProcesses(ctx context.Context) error {
	if cp.Node != nil && cp.opts.StaticPods {
		cp.progressf("control plane: child processes (static pods need the runc runtime)")
	}
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
	return nil
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

// stopStaticPods removes the components' manifests, so that the node agent
// stops them with their grace period, and waits until they are gone.
func (cp *ControlPlane) stopStaticPods(names ...string) {
	var running []string
	for _, c := range cp.Components(cp.bin) {
		if slices.Contains(names, c.Name) {
			cp.progressf("stopping %s", c.Name)
			_ = os.Remove(filepath.Join(cp.dataDir, "manifests", c.Name+".yaml"))
			running = append(running, c.Args[0])
		}
	}
	binDir := filepath.Join(cp.dataDir, "bin") + "/"
	for deadline := time.Now().Add(nodeStopGrace); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if len(procfs.Find(func(argv []string) bool {
			return len(argv) > 1 && strings.HasPrefix(argv[0], binDir) && slices.Contains(running, argv[1])
		})) == 0 {
			return
		}
	}
	cp.progressf("%v still running after %v; the node agent stops them now", names, nodeStopGrace)
}

// writeManifests writes the named components' static pods into the node
// agent's manifest directory.
func (cp *ControlPlane) writeManifests(names ...string) error {
	for _, c := range cp.Components(cp.bin) {
		if slices.Contains(names, c.Name) {
			if err := WriteManifest(filepath.Join(cp.dataDir, "manifests"), c.Pod()); err != nil {
				return err
			}
		}
	}
	return nil
}
