// Package cluster is the robustness run's cluster: servers and workers of
// steadyplane in network namespaces of their own (testenv.ClusterLayout),
// started as a user starts them (up, joins by token, node), with the
// faults the injector asks for (faults.Cluster).
package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
)

// PodRange is the pods' range of the run's cluster.
const PodRange = "10.222.0.0/16"

// Cluster is a running cluster. Servers are hosts 0 to Servers-1.
type Cluster struct {
	Servers int
	// Kubeconfig is the first server's admin kubeconfig (every server in
	// it: clients fail over without a load balancer).
	Kubeconfig string

	nw    *testenv.Network
	hosts []*testenv.ClusterHost
	bin   string
	logf  func(string, ...any)

	mu    sync.Mutex
	procs []*exec.Cmd
}

// Start lays out servers servers and workers workers under work and
// starts them: the first server, then each other server joined with its
// token, then the workers; it returns once every Node is Ready.
func Start(ctx context.Context, bin, work string, servers, workers int, logf func(string, ...any)) (*Cluster, error) {
	if err := testenv.UnusedRange(PodRange); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, err
	}
	nw, err := testenv.NewNetwork(servers + workers)
	if err != nil {
		return nil, err
	}
	hosts, err := testenv.ClusterLayout(nw, work, servers, workers, PodRange)
	if err != nil {
		nw.Close()
		return nil, err
	}
	c := &Cluster{Servers: servers, nw: nw, hosts: hosts, bin: bin, logf: logf, procs: make([]*exec.Cmd, len(hosts)),
		Kubeconfig: filepath.Join(hosts[0].DataDir(), "admin.kubeconfig")}
	began := time.Now()
	for i, h := range hosts {
		if i > 0 {
			if err := h.TakeToken(hosts[0]); err != nil {
				c.Close()
				return nil, err
			}
		}
		if err := c.StartHost(ctx, i); err != nil {
			c.Close()
			return nil, err
		}
	}
	cfg, _, err := clientconfig.Load(c.Kubeconfig, clientconfig.Options{})
	if err != nil {
		c.Close()
		return nil, err
	}
	if err := testenv.WaitReadyNodes(ctx, kubernetes.NewForConfigOrDie(cfg), len(hosts), 5*time.Minute); err != nil {
		c.Close()
		return nil, err
	}
	logf("%d servers and %d workers Ready in %s", servers, workers, time.Since(began).Round(time.Second))
	return c, nil
}

// StartHost starts host i's up (or node) and returns once it is up (a
// worker: once started; its Node turns Ready later).
func (c *Cluster) StartHost(ctx context.Context, i int) error {
	h := c.hosts[i]
	cmd := h.Command(c.nw, c.bin)
	if !h.Server {
		log, err := os.OpenFile(filepath.Join(h.Dir, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			log.Close()
			return err
		}
		go func() { _ = cmd.Wait(); log.Close() }()
		c.setProc(i, cmd)
		return nil
	}
	up, err := testenv.StartUp(ctx, cmd.Args[0], cmd.Args[1:])
	if err != nil {
		return fmt.Errorf("%s: %w (its logs: %s)", h.Name, err, filepath.Join(h.DataDir(), "logs"))
	}
	c.setProc(i, up.Cmd())
	return nil
}

func (c *Cluster) setProc(i int, cmd *exec.Cmd) {
	c.mu.Lock()
	c.procs[i] = cmd
	c.mu.Unlock()
}

// Signal sends sig to host's processes of component (the steadyplane
// command they run: "apiserver", "etcd").
func (c *Cluster) Signal(host int, component string, sig syscall.Signal) error {
	n := 0
	for _, p := range testenv.ClusterProcesses(c.hosts[host].DataDir()) {
		if p.Name == component {
			if err := syscall.Kill(p.Pid, sig); err == nil {
				n++
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("no %s process on %s", component, c.hosts[host].Name)
	}
	return nil
}

// KillHost kills every process of host with SIGKILL and ends what its
// node agent ran (a machine that lost its power runs nothing after).
func (c *Cluster) KillHost(host int) error {
	c.nw.KillAll(host)
	c.mu.Lock()
	cmd := c.procs[host]
	c.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
	testenv.CleanHost(c.nw, c.hosts[host], c.bin)
	return nil
}

// BlackHole cuts host's link.
func (c *Cluster) BlackHole(host int) error { return c.nw.BlackHole(host) }

// Restore mends host's link.
func (c *Cluster) Restore(host int) error { return c.nw.Restore(host) }

// Lossy drops percent of host's packets.
func (c *Cluster) Lossy(host, percent int) error { return c.nw.Lossy(host, percent) }

// Unlossy undoes Lossy.
func (c *Cluster) Unlossy(host, percent int) { c.nw.Unlossy(host, percent) }

// LogDirs are the servers' log directories, for a report.
func (c *Cluster) LogDirs() map[string]string {
	dirs := map[string]string{}
	for _, h := range c.hosts {
		if h.Server {
			dirs[h.Name] = filepath.Join(h.DataDir(), "logs")
		} else {
			dirs[h.Name] = filepath.Join(h.Dir, "node.log")
		}
	}
	return dirs
}

// Close stops every host (SIGTERM, as a service manager stops up), ends
// what they left and removes the network. A process a fault left stopped
// is continued, and a cut link mended, first.
func (c *Cluster) Close() {
	for i, h := range c.hosts {
		if h.Server {
			_ = c.Signal(i, "apiserver", syscall.SIGCONT)
			_ = c.Signal(i, "etcd", syscall.SIGCONT)
		}
		_ = c.nw.Restore(i)
	}
	c.mu.Lock()
	procs := append([]*exec.Cmd(nil), c.procs...)
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		if p := procs[i]; p != nil && p.Process != nil {
			testenv.StopProcess(p.Process, 45*time.Second)
		}
		testenv.CleanHost(c.nw, c.hosts[i], c.bin)
	}
	c.nw.Close()
}
