package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/util/flowcontrol"

	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/fallback/release"
	"github.com/steadyplane/steadyplane/pkg/join"
	"github.com/steadyplane/steadyplane/pkg/node/agent"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// Stop stops what runs, in the reverse of the start-up order, each with
// the configured grace (see the launcher's Stop).
func (cp *ControlPlane) Stop() {
	cp.launcher.Stop(stopOrder()...)
}

// stopProcess stops p, if it runs, with the configured grace.
func (cp *ControlPlane) stopProcess(p *Process) {
	if p == nil || p.Exited() == nil {
		return
	}
	select {
	case <-p.Exited():
		return
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

// Run is "steadyplane up": prepare, run the control plane, print how to
// reach the cluster, restart what dies, and stop everything when ctx ends.
// With runc on this node the control plane runs as static pods on the node
// agent, as kubeadm and the kubelet do: the agent runs and restarts them,
// with no API server needed. Without runc (host processes cannot mount their
// files) "up" runs each component as its own child process instead.
func Run(ctx context.Context, o Options) error {
	if err := runFromDataDir(&o); err != nil {
		return err
	}
	cp, err := Prepare(o)
	if err != nil {
		return releasePrepareFailed(o, err)
	}
	defer cp.Close()
	defer cp.Stop()
	cp.progressf("data directory %s (certificates in pki/, logs in logs/)", cp.dir)
	cp.staticPods = cp.opts.StaticPods && cp.Node != nil && cp.nodeRuntime == "runc"
	if cp.staticPods {
		l, err := newStaticPodLauncher(cp)
		if err != nil {
			return err
		}
		cp.launcher = l
	}
	if cp.opts.ClusterReset {
		// Once, and then out, as k3s's --cluster-reset: a unit that kept
		// the flag would otherwise reset the cluster at every start.
		return cp.resetEtcd(ctx)
	}
	if d := cp.launcher.Describe(); d != "" {
		cp.progressf("%s", d)
	}
	if err := cp.start(ctx); err != nil {
		if ctx.Err() != nil {
			cp.releaseRequeue() // stopped while starting: no verdict on the release
			return err
		}
		return cp.releaseStartFailed(ctx, err)
	}
	if err := cp.refreshServers(ctx); err != nil {
		cp.progressf("reading the cluster's API servers: %v", err)
	}
	if err := cp.publishJoin(ctx); err != nil {
		return err
	}
	if cp.addr.host() != nil {
		client, err := cp.adminClient()
		if err != nil {
			return err
		}
		// Worker nodes' client and serving certificates (steadyplane node --server).
		agent.RegisterMetrics(join.Collectors()...)
		go join.RunCertificateApprover(ctx, client, cp.progressf)
		// The join data for server tokens made while it runs (its
		// publisher made before followServers writes the state).
		go cp.publisher().RunSealer(ctx, client)
	}
	go cp.followServers(ctx, 30*time.Second)
	go cp.snapshotEtcd(ctx)
	go cp.keepCertificatesRenewed(ctx)
	cp.progressf("kubeconfig: %s", cp.Kubeconfig())
	cp.progressf("  kubectl --kubeconfig %s get namespaces", cp.Kubeconfig())
	cp.progressf("  steadyplane kubectl --kubeconfig %s get namespaces   # fails over between API servers", cp.Kubeconfig())
	cp.progressf("steadyplane is up; press Ctrl-C to stop")
	cp.releaseUp(ctx)
	go cp.followRelease(ctx)
	// From now on up only supervises: what starting made (configurations,
	// clients, the DNS image's buffers) goes back to the system.
	debug.FreeOSMemory()
	return cp.supervise(ctx)
}

// releasePoll is how often a running up looks for a move to another
// release.
const releasePoll = time.Second

// supervise restarts a supervised process that exits until ctx ends, with
// the kubelet's style of backoff (doubling from 1s to 30s, forgotten after a
// long healthy run).
func (cp *ControlPlane) supervise(ctx context.Context) error {
	backoff := flowcontrol.NewBackOff(time.Second, 30*time.Second)
	names := cp.launcher.Supervised()
	// A move to another release (steadyplane upgrade) is looked for every
	// releasePoll.
	releaseTick := time.NewTicker(releasePoll)
	defer releaseTick.Stop()
	for {
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}, {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(releaseTick.C)}}
		for _, name := range names {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(cp.launcher.Runner(name).Exited())})
		}
		chosen, _, _ := reflect.Select(cases)
		switch chosen {
		case 0:
			cp.progressf("shutting down")
			if cp.settle != nil {
				cp.releaseRequeue() // stopped while it settled: no verdict on the release
			}
			return nil
		case 1:
			if err := cp.releaseSettleStep(ctx); err != nil {
				return err
			}
			if target := cp.releaseRequested(); target != "" {
				return cp.handOver(ctx, target)
			}
			continue
		}
		name := names[chosen-2]
		if err := cp.restart(ctx, cp.launcher.Runner(name), backoff, func(ctx context.Context) error { return componentNamed(name).ready(cp, ctx) }); err != nil {
			return err
		}
	}
}

// restart starts p again after the backoff and waits until it is ready.
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
	if len(names) == 0 {
		return
	}
	var running []string
	for _, c := range cp.podSpecs(cp.bin) {
		if slices.Contains(names, c.Name) {
			cp.progressf("stopping %s", c.Name)
			_ = os.Remove(cp.dir.manifest(c.Name))
			running = append(running, c.Args[0])
		}
	}
	binDir := cp.dir.binDir() + "/"
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
	for _, c := range cp.podSpecs(cp.bin) {
		if slices.Contains(names, c.Name) {
			if err := staticpod.Write(cp.dir.manifestsDir(), c.Pod()); err != nil {
				return err
			}
		}
	}
	return nil
}

// installedBinary is the binary the static pods and images run: this one,
// kept in the data directory by its content (package binary), installed
// once per run.
func (cp *ControlPlane) installedBinary() (string, error) {
	if cp.bin != "" {
		return cp.bin, nil
	}
	bin, err := binary.Install(cp.opts.Binary, cp.dir.binDir())
	if err != nil {
		return "", err
	}
	cp.bin = bin
	return bin, nil
}

// runFromDataDir makes "up" run from the copy of its binary that its static
// pods run (package binary): every process of the server then maps one
// file, whose pages the kernel keeps once, where up from a checkout or a
// download would keep a second copy of the quarter of a gigabyte for
// itself and its node agent. It replaces this process (exec) and does not
// return, unless up already runs from that copy, the binary is given, or
// static pods will not run (not root, no runc; then it does nothing).
func runFromDataDir(o *Options) error {
	if o.Binary != "" || !o.StaticPods || !o.Node || os.Geteuid() != 0 {
		return nil
	}
	if name, _, err := runc.Choose(o.NodeRuntime); err != nil || name != "runc" {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil // Prepare reports it
	}
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	// The running binary's path has no symbolic links in it: compared
	// with one that has, the copy would exec itself again and again.
	if dataDir, err = filepath.EvalSymlinks(dataDir); err != nil {
		return err
	}
	// The release is chosen under the data directory's lock, which
	// Prepare keeps (an exec lets go of it): a second up must not touch
	// the release state of the one that runs.
	lock, err := lockDir(dataDir)
	if err != nil {
		return err
	}
	installed, err := binary.Install(self, layout(dataDir).binDir())
	if err != nil {
		lock.Close()
		return err
	}
	// The data directory may run another release (a move asked for, one
	// that failed, a newer one current): release.Start decides.
	run, err := release.Choose(dataDir, installed, func(format string, args ...any) {
		if o.Out != nil {
			fmt.Fprintf(o.Out, format+"\n", args...)
		}
	})
	if err != nil {
		lock.Close()
		return err
	}
	if run == self {
		o.heldLock = lock
		return nil
	}
	lock.Close()
	return syscall.Exec(run, os.Args, os.Environ())
}
