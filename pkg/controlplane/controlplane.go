// Package controlplane runs a single-node steadyplane control plane: it
// prepares the PKI and kubeconfig in a data directory, starts "steadyplane etcd"
// and "steadyplane apiserver" as child processes, waits until each is ready,
// restarts either if it dies, and stops them in order. "steadyplane up" is a
// thin shell over Run; tests and benchmarks use the same steps one by one.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/pkg/clusterdns"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// ControlPlane is a prepared data directory and the child processes run from it.
type ControlPlane struct {
	opts       Options
	dataDir    string
	pki        *pki.Cluster
	kubeconfig string
	advertise  net.IP
	// bridgeAddress is the address up put on the pod bridge for the
	// cluster (see OwnsNodeAddress); nil when it uses the one named.
	bridgeAddress net.IP
	lock          *os.File
	// admissionConfig is the API server's admission configuration file.
	admissionConfig string

	Etcd, APIServer, ControllerManager, Scheduler, Node, Proxy, Readiness *Process

	// nodeRuntime is the node agent's runtime on this machine (runc or
	// process); staticPods is set when Run runs the control plane as
	// static pods on the node agent.
	nodeRuntime string
	staticPods  bool
	// proxyMode is kube-proxy's mode on this machine.
	proxyMode string
	// dns is the cluster's DNS, nil without.
	dns *clusterdns.Config
	// launcher runs the components: child processes unless Run chooses
	// static pods.
	launcher Launcher
	// bin is the binary the static pods run.
	bin string
	// state is what the data directory records about its cluster.
	state ClusterState
	// etcdJoin is set while this server's etcd member joins the cluster.
	etcdJoin *etcdJoin
	// sealedEncryption is the encryption configuration the published
	// join data carries.
	sealedEncryption []byte
}

// Prepare checks the options, takes the data directory's lock (one control
// plane per directory), and creates or reuses the PKI and the admin kubeconfig.
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
	lock, err := lockDir(dataDir)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{opts: o, dataDir: dataDir, lock: lock}
	cp.launcher = processLauncher{cp: cp}
	if cp.opts.Binary == "" {
		if cp.opts.Binary, err = os.Executable(); err != nil {
			cp.Close()
			return nil, err
		}
	}
	if cp.state, err = LoadClusterState(dataDir); err != nil {
		cp.Close()
		return nil, err
	}
	joinCtx, cancel := context.WithTimeout(context.Background(), cp.opts.ReadyTimeout)
	defer cancel()
	if err := cp.prepareJoin(joinCtx); err != nil {
		cp.Close()
		return nil, err
	}
	if err := cp.preparePKI(); err != nil {
		cp.Close()
		return nil, err
	}
	if err := cp.prepareJoinedNode(joinCtx); err != nil {
		cp.Close()
		return nil, err
	}
	if cp.admissionConfig, err = cp.writeAdmissionConfig(); err != nil {
		cp.Close()
		return nil, err
	}
	if err := cp.ensureEncryptionConfig(nil); err != nil {
		cp.Close()
		return nil, err
	}
	cp.Etcd = &Process{Name: "etcd", Binary: cp.opts.Binary, Args: cp.etcdArgs(), LogPath: filepath.Join(dataDir, "logs", "etcd.log")}
	cp.APIServer = &Process{Name: "apiserver", Binary: cp.opts.Binary, Args: cp.apiserverArgs(), LogPath: filepath.Join(dataDir, "logs", "apiserver.log")}
	if cp.opts.Controllers {
		if err := cp.prepareControllers(); err != nil {
			cp.Close()
			return nil, err
		}
	}
	if cp.opts.Node {
		if err := cp.prepareNode(); err != nil {
			cp.Close()
			return nil, err
		}
	}
	if cp.opts.Proxy && cp.Node != nil {
		if err := cp.prepareProxy(exec.LookPath); err != nil {
			cp.Close()
			return nil, err
		}
	}
	if cp.opts.DNS && cp.Node != nil {
		if err := cp.prepareDNS(); err != nil {
			cp.Close()
			return nil, err
		}
	}
	if cp.opts.Fallback.Enabled(cp.opts.Controllers && cp.opts.Node) {
		if err := cp.prepareFallback(); err != nil {
			cp.Close()
			return nil, err
		}
	}
	if cp.opts.ReadinessController {
		if err := cp.prepareReadiness(); err != nil {
			cp.Close()
			return nil, err
		}
	}
	return cp, nil
}

// lockDir takes an exclusive lock on the data directory, so that a second
// "up" on it fails at once instead of corrupting etcd's data.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data directory %s is in use by another steadyplane (lock %s): %w", dir, f.Name(), err)
	}
	return f, nil
}

// Kubeconfig is the path of the admin kubeconfig.
func (cp *ControlPlane) Kubeconfig() string { return cp.kubeconfig }

// DataDir is the absolute data directory.
func (cp *ControlPlane) DataDir() string { return cp.dataDir }

// PKI returns the certificates and keys of the control plane.
func (cp *ControlPlane) PKI() *pki.Cluster { return cp.pki }

// store is the control plane's PKI directory, reporting what it issues.
func (cp *ControlPlane) store() *pki.Store {
	return &pki.Store{Dir: filepath.Join(cp.dataDir, "pki"), Logf: func(f string, a ...any) { cp.progressf("pki: "+f, a...) }}
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
	return clientcmd.BuildConfigFromFlags("", cp.kubeconfig)
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
