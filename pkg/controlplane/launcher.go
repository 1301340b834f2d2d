package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"syscall"
)

// Launcher runs the control plane's components: as static pods on the node
// agent (staticPodLauncher) or as child processes of "up"
// (processLauncher). What runs when is startOrder's; what each component
// is, the table's; how it runs, the launcher's.
type Launcher interface {
	// Describe is the progress line that says how the components run, or "".
	Describe() string
	// Start starts the named components (of one stage) without waiting for
	// them to be ready. Names the launcher has no component for are skipped.
	Start(ctx context.Context, names ...string) error
	// Runner is the process whose end ends a wait for the named component:
	// its own, or the node agent that runs it.
	Runner(name string) *Process
	// Stop stops the named components, given in the reverse of the start
	// order, each with its grace period.
	Stop(names ...string)
	// Supervised are the components whose processes "up" restarts when they
	// die (the node agent restarts static pods by itself).
	Supervised() []string
}

// processLauncher runs each component as a child process.
type processLauncher struct{ cp *ControlPlane }

// process is the named component's child process, nil when it has none.
func (l processLauncher) process(name string) *Process {
	c := componentNamed(name)
	if c.process == nil {
		return nil
	}
	return c.process(l.cp)
}

// Describe implements Launcher.
func (l processLauncher) Describe() string {
	if l.cp.Node != nil && l.cp.opts.StaticPods {
		return "control plane: child processes (static pods need the runc runtime)"
	}
	return ""
}

// Start implements Launcher.
func (l processLauncher) Start(_ context.Context, names ...string) error {
	for _, name := range names {
		p := l.process(name)
		if p == nil {
			continue
		}
		if name == nodeComponent {
			l.cp.progressf("starting node agent %s (log: %s)", l.cp.opts.NodeName, p.LogPath)
		} else {
			l.cp.progressf("starting %s (log: %s)", p.Name, p.LogPath)
		}
		if err := p.Start(); err != nil {
			return err
		}
	}
	return nil
}

// Runner implements Launcher.
func (l processLauncher) Runner(name string) *Process { return l.process(name) }

// Stop implements Launcher.
func (l processLauncher) Stop(names ...string) {
	for _, name := range names {
		l.cp.stopProcess(l.process(name))
	}
}

// Supervised implements Launcher: every component with a process, in the
// table's order.
func (l processLauncher) Supervised() []string {
	var out []string
	for _, c := range components {
		if c.process != nil && c.process(l.cp) != nil {
			out = append(out, c.name)
		}
	}
	return out
}

// staticPodLauncher writes each component as a static pod into the node
// agent's manifest directory, as kubeadm does for the kubelet; the node
// agent, a child process, runs and restarts them with no API server needed.
type staticPodLauncher struct{ cp *ControlPlane }

// newStaticPodLauncher installs the binary the static pods run and removes
// the manifests of components that must not start before the API server
// (nor at all, if they are switched off now).
func newStaticPodLauncher(cp *ControlPlane) (staticPodLauncher, error) {
	if _, err := cp.installedBinary(); err != nil {
		return staticPodLauncher{}, fmt.Errorf("installing the binary for the static pods: %w", err)
	}
	for _, c := range components {
		if c.pod == nil || slices.Contains(startOrder[0].start, c.name) {
			continue
		}
		if err := os.Remove(cp.dir.manifest(c.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return staticPodLauncher{}, err
		}
	}
	if !cp.fallbackOn() {
		if err := os.Remove(cp.dir.apiserverRevisions().MonitorManifest()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return staticPodLauncher{}, err
		}
	}
	return staticPodLauncher{cp: cp}, nil
}

// Describe implements Launcher.
func (l staticPodLauncher) Describe() string {
	return fmt.Sprintf("control plane: static pods in %s, run by the node agent (kubectl logs -n kube-system ...)", l.cp.dir.manifestsDir())
}

// Start implements Launcher. The node agent starts after the stage's
// manifests are in place, so that it never runs a manifest an earlier run
// left behind (a revision the fallback has since replaced).
func (l staticPodLauncher) Start(ctx context.Context, names ...string) error {
	cp := l.cp
	for _, name := range names {
		c := componentNamed(name)
		switch {
		case c.install != nil:
			if err := c.install(cp, ctx); err != nil {
				return err
			}
		case c.pod != nil:
			if err := cp.writeManifests(name); err != nil {
				return err
			}
		}
	}
	if slices.Contains(names, nodeComponent) {
		cp.progressf("starting node agent %s (log: %s)", cp.opts.NodeName, cp.Node.LogPath)
		return cp.Node.Start()
	}
	return nil
}

// Runner implements Launcher: the node agent runs every static pod.
func (l staticPodLauncher) Runner(string) *Process { return l.cp.Node }

// Stop implements Launcher: the controllers go first, together, and hand
// their leases back while the API server still answers; the API server
// goes before etcd, which stops with the node agent (or just before it,
// when the agent leaves the workloads running).
func (l staticPodLauncher) Stop(names ...string) {
	l.stop(names, !l.cp.opts.StopPodsOnExit)
}

// stop is Stop; leavePods leaves the workloads running for the next node
// agent to adopt, whatever the agent was started with: the control plane
// stops first, etcd too, and an agent that would take its pods with it is
// killed instead, as a crash would (runc's containers outlive it).
func (l staticPodLauncher) stop(names []string, leavePods bool) {
	cp := l.cp
	if cp.Node.Exited() == nil {
		return // never started
	}
	var first []string
	for _, name := range names {
		if !slices.Contains(startOrder[0].start, name) {
			first = append(first, name)
		}
	}
	cp.stopStaticPods(first...)
	if slices.Contains(names, apiserverComponent) {
		// A startup monitor would see its revision go and wait; it goes
		// first all the same. The next "up" starts last-known-good.
		_ = os.Remove(cp.dir.apiserverRevisions().MonitorManifest())
		cp.stopStaticPods(apiserverComponent)
	}
	if !leavePods {
		cp.stopProcess(cp.Node)
		return
	}
	if slices.Contains(names, etcdComponent) {
		// The control plane is not among the pods left: the next up
		// starts it from its own binary.
		cp.stopStaticPods(etcdComponent)
	}
	if !cp.opts.StopPodsOnExit {
		cp.stopProcess(cp.Node)
		return
	}
	cp.progressf("stopping node (its pods keep running)")
	_ = cp.Node.Signal(syscall.SIGKILL)
	<-cp.Node.Exited()
}

// Supervised implements Launcher.
func (l staticPodLauncher) Supervised() []string { return []string{nodeComponent} }
