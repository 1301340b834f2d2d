// Package controlplane is "steadyplane up": it runs one server of a
// steadyplane cluster from a data directory, the cluster's first server or
// one that joins it (--server with a token; package join).
//
// Prepare locks the data directory and makes or reuses what the server
// needs there (layout.go): the cluster's CAs and keys (received sealed
// when joining), a client certificate and kubeconfig per component, the
// API server's admission and secrets-encryption configuration, and, on a
// joining server, its etcd member, added as a learner. The components are
// one table (components.go): etcd, kube-apiserver and the node agent; the
// controller manager and the scheduler; kube-proxy (package
// addons/kubeproxy); the KubeAPIServer operator, which from then on rolls
// the API server out as revisions a startup monitor falls back from
// (package fallback); CoreDNS (package addons/coredns); the readiness-gate
// webhook and controller (package readinessgates). Run starts them stage
// by stage (order.go), each stage waiting until its components are ready;
// components that are switched off, or that the machine cannot run, are
// left out. With runc they run as static pods on the node agent, otherwise
// as child processes of up (launcher.go). Once the API server serves, Run
// publishes what joining servers and workers need, keeps the admin
// kubeconfig's list of API servers current (cluster.go), restarts its
// child processes when they exit (under static pods the node agent
// restarts the pods), and when its context ends stops everything in
// reverse order.
//
// Tests and benchmarks run the same steps one by one (Prepare, StartEtcd,
// StartAPIServer, WaitAPIServerReady, ...).
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/pkg/addons/coredns"
	"github.com/steadyplane/steadyplane/pkg/addons/metricsapi"
	"github.com/steadyplane/steadyplane/pkg/fallback/release"
	"github.com/steadyplane/steadyplane/pkg/join"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// ControlPlane is a prepared data directory and the components run from it.
type ControlPlane struct {
	opts Options
	// dir is the data directory; lock holds it for this process.
	dir  layout
	lock *os.File
	// addr is where the components listen and are reached.
	addr addresses
	pki  *pki.Cluster
	// pkiConfig is what the cluster's certificates were made for; issued
	// the other certificates up keeps renewed while it runs.
	pkiConfig pki.ClusterConfig
	issued    issuedCerts
	// adminRenewed tells followServers, which owns the admin kubeconfig
	// (it lists the servers it reads), that the admin certificate was
	// renewed.
	adminRenewed chan struct{}
	// state is what the data directory records about its cluster;
	// etcdJoin is set while this server's etcd member joins it.
	state    join.State
	etcdJoin *join.EtcdJoin
	// sealedEncryption is the encryption configuration the published
	// join data carries.
	sealedEncryption []byte
	// admissionConfig is the API server's admission configuration file.
	admissionConfig string

	// The components' processes, nil for those this run does not have.
	Etcd, APIServer, ControllerManager, Scheduler, Node, Proxy, Readiness, Addons *Process

	// nodeRuntime is the node agent's runtime on this machine (runc or
	// process); staticPods is set when Run runs the control plane as
	// static pods on the node agent.
	nodeRuntime string
	// nodeKubeconfig has the node agent's credentials (system:node:<name>).
	nodeKubeconfig string
	staticPods     bool
	// proxyMode is kube-proxy's mode on this machine.
	proxyMode string
	// dns is the cluster's DNS, nil without; metrics is the metrics API,
	// nil without.
	dns     *coredns.Config
	metrics *metricsapi.Config
	// addonImage adds the image the add-ons in the API run from (the
	// binary's) to the node's store while the stages before them start;
	// addonImageRef names it once done.
	addonImage    *pending
	addonImageRef string
	// launcher runs the components: child processes unless Run chooses
	// static pods.
	launcher Launcher
	// bin is the installed binary the static pods run.
	bin string
	// settle watches a move's first start once it is up (package
	// release); nil when this up is none, or once it settled.
	settle *release.Settle
}

// Prepare checks the options, takes the data directory's lock (one control
// plane per directory), and creates or reuses the PKI, the kubeconfigs and
// the components' processes (the table's prepare, in order).
func Prepare(o Options) (*ControlPlane, error) {
	o.complete()
	if err := o.validate(); err != nil {
		return nil, err
	}
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	// It holds keys and etcd's data: nobody else may even list it, also
	// when it was made by hand before.
	if err := os.Chmod(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dataDir, err)
	}
	lock := o.heldLock
	if lock == nil {
		if lock, err = lockDir(dataDir); err != nil {
			return nil, err
		}
	}
	cp := &ControlPlane{opts: o, dir: layout(dataDir), lock: lock, adminRenewed: make(chan struct{}, 1)}
	cp.launcher = processLauncher{cp: cp}
	if err := cp.prepare(); err != nil {
		cp.Close()
		return nil, err
	}
	return cp, nil
}

// prepare is Prepare once the directory is locked.
func (cp *ControlPlane) prepare() error {
	var err error
	if cp.opts.Binary == "" {
		if cp.opts.Binary, err = os.Executable(); err != nil {
			return err
		}
	}
	if cp.state, err = join.LoadState(string(cp.dir)); err != nil {
		return err
	}
	joinCtx, cancel := context.WithTimeout(context.Background(), cp.opts.ReadyTimeout)
	defer cancel()
	if err := cp.prepareJoin(joinCtx); err != nil {
		return err
	}
	// Recorded for the commands that reach this server's own parts
	// (etcd-snapshot).
	if cp.state.NodeName != cp.opts.NodeName || cp.state.LocalEtcdClientPort != cp.opts.EtcdClientPort {
		cp.state.NodeName, cp.state.LocalEtcdClientPort = cp.opts.NodeName, cp.opts.EtcdClientPort
		if err := join.SaveState(string(cp.dir), cp.state); err != nil {
			return err
		}
	}
	if err := cp.preparePKI(); err != nil {
		return err
	}
	if err := cp.prepareJoinedNode(joinCtx); err != nil {
		return err
	}
	if cp.admissionConfig, err = cp.writeAdmissionConfig(); err != nil {
		return err
	}
	if err := cp.ensureEncryptionConfig(nil); err != nil {
		return err
	}
	for _, c := range components {
		if c.prepare == nil {
			continue
		}
		if err := c.prepare(cp); err != nil {
			return err
		}
	}
	return nil
}

// lockDir takes an exclusive lock on the data directory, so that a second
// "up" on it fails at once instead of corrupting etcd's data.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory lock: %w", err)
	}
	// A second's patience: an up that hands over to another binary lets
	// go of the lock for the moment of its exec, and steadyplane upgrade
	// tries it to tell whether an up runs.
	for deadline := time.Now().Add(time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("data directory %s is in use by another steadyplane (lock %s): %w", dir, f.Name(), err)
		}
	}
}

// Kubeconfig is the path of the admin kubeconfig.
func (cp *ControlPlane) Kubeconfig() string { return cp.dir.adminKubeconfig() }

// DataDir is the absolute data directory.
func (cp *ControlPlane) DataDir() string { return string(cp.dir) }

// PKI returns the certificates and keys of the control plane.
func (cp *ControlPlane) PKI() *pki.Cluster { return cp.pki }

// APIServerURL is where clients reach the API server.
func (cp *ControlPlane) APIServerURL() string { return cp.addr.apiserverURL() }

// store is the control plane's PKI directory, reporting what it issues.
func (cp *ControlPlane) store() *pki.Store { return cp.storeIn(cp.dir.pkiDir()) }

// storeIn is the PKI store of dir: the cluster's (pki/), or a component's
// credentials.
func (cp *ControlPlane) storeIn(dir string) *pki.Store {
	return &pki.Store{Dir: dir, Validity: cp.opts.CertValidity, Logf: func(f string, a ...any) { cp.progressf("pki: "+f, a...) }}
}

// adminClient returns a clientset with the admin credentials.
func (cp *ControlPlane) adminClient() (kubernetes.Interface, error) {
	cfg, err := cp.AdminConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// AdminConfig returns a client configuration with the admin credentials.
func (cp *ControlPlane) AdminConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig())
	if err != nil {
		return nil, err
	}
	// up's own clients run as long as it does: they name the admin
	// certificate's files, which client-go reads again when renewed.
	if cp.pki != nil && cp.pki.Admin != nil {
		cfg.CertData, cfg.KeyData = nil, nil
		cfg.CertFile, cfg.KeyFile = cp.pki.Admin.CertPath, cp.pki.Admin.KeyPath
	}
	return cfg, nil
}

// Close releases the data directory lock. It does not stop the children.
func (cp *ControlPlane) Close() {
	if cp.lock != nil {
		cp.lock.Close()
		cp.lock = nil
	}
}

func (cp *ControlPlane) progressf(format string, args ...any) {
	if cp.opts.Out != nil {
		fmt.Fprintf(cp.opts.Out, format+"\n", args...)
	}
}

func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// readyPoll is how often a component's readiness is asked while it starts:
// often enough that a start is seen within a few tens of milliseconds,
// each check a local request.
const readyPoll = 50 * time.Millisecond

// waitFor calls check every interval until it succeeds, the runner of the
// named component exits, ctx ends, or the ready timeout passes.
func (cp *ControlPlane) waitFor(ctx context.Context, name string, interval time.Duration, check func(context.Context) (bool, string)) error {
	return poll(ctx, cp.launcher.Runner(name), cp.opts.ReadyTimeout, interval, check)
}

// poll calls check until it succeeds, p exits (an error with the end of its
// log), ctx ends, or timeout passes.
func poll(ctx context.Context, p *Process, timeout, interval time.Duration, check func(context.Context) (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	last := ""
	for {
		ok, status := check(ctx)
		if ok {
			return nil
		}
		last = status
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited while starting (%v); last lines of %s:\n%s", p.Name, p.Err(), p.LogPath, p.LogTail(15))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s not ready after %v (%s); see %s", p.Name, timeout, last, p.LogPath)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// pending is work that runs while up goes on (the DNS image), and its
// outcome once done.
type pending struct {
	done chan struct{}
	err  error
}

// startPending runs f in the background.
func startPending(f func() error) *pending {
	p := &pending{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = f()
	}()
	return p
}

// wait is f's error once it is done, or ctx's.
func (p *pending) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
