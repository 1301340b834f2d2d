package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/pkg/controlplane"
	"github.com/steadyplane/steadyplane/pkg/node/podnet"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
)

// ControlPlaneOptions returns control plane options for a test: the given data
// directory, free loopback ports, a 1s Retry-After, and progress to out.
func ControlPlaneOptions(dataDir string, out io.Writer) (controlplane.Options, error) {
	bin, err := Binary()
	if err != nil {
		return controlplane.Options{}, err
	}
	ports, err := FreePorts(11)
	if err != nil {
		return controlplane.Options{}, err
	}
	o := *controlplane.NewOptions()
	o.DataDir = dataDir
	o.Binary = bin
	o.APIServerPort, o.EtcdClientPort, o.EtcdPeerPort, o.NodeMetricsPort, o.ReadinessWebhookPort = ports[0], ports[1], ports[2], ports[3], ports[4]
	o.NodeAPIPort, o.ControllerManagerPort, o.SchedulerPort, o.OperatorMetricsPort = ports[5], ports[6], ports[7], ports[8]
	o.ProxyHealthzPort, o.ProxyMetricsPort = ports[9], ports[10]
	// One kube-proxy per machine: its nftables table is the host's, and
	// test packages run at once. The tests of Services start their own.
	o.Proxy = false
	o.DNS = false
	// A pod range and bridge of this control plane's own: test packages
	// run at once, and two nodes must never hand out the same address.
	o.PodCIDR = fmt.Sprintf("10.245.%d.0/24", ports[0]%250)
	o.CNIBridge = fmt.Sprintf("spt%d", ports[0])
	o.RetryAfter = time.Second
	o.StopGrace = 20 * time.Second
	o.Out = out
	// The harness's pods use hostPath, host networking and the host runtime
	// class in namespace default: the tests check the node, not Pod Security.
	o.PodSecurity = "privileged"
	if os.Geteuid() != 0 {
		// Isolated pods need root; outside CI the harness runs them as
		// host processes, as it asks explicitly.
		o.NodeRuntime = "process"
	}
	return o, nil
}

// StartControlPlane prepares a control plane and starts etcd and the API
// server, and the controller manager and scheduler unless o.Controllers is
// off, waiting for each to be ready. The caller must call Stop and Close.
func StartControlPlane(ctx context.Context, o controlplane.Options) (*controlplane.ControlPlane, error) {
	cp, err := controlplane.Prepare(o)
	if err != nil {
		return nil, err
	}
	if !IsLoopbackURL(cp.APIServerURL()) {
		cp.Close()
		return nil, fmt.Errorf("refusing to test against non-loopback %s", cp.APIServerURL())
	}
	if _, err := cp.StartEtcd(ctx); err != nil {
		cp.Stop()
		cp.Close()
		return nil, err
	}
	if err := cp.StartAPIServer(); err != nil {
		cp.Stop()
		cp.Close()
		return nil, err
	}
	if err := cp.WaitAPIServerReady(ctx); err != nil {
		cp.Stop()
		cp.Close()
		return nil, err
	}
	// The node's test pods run host programs: the host runtime class.
	if err := ensureHostRuntimeClass(ctx, cp); err != nil {
		cp.Stop()
		cp.Close()
		return nil, err
	}
	if cp.ControllerManager != nil {
		if err := cp.StartControllers(ctx); err != nil {
			cp.Stop()
			cp.Close()
			return nil, err
		}
	}
	return cp, nil
}

// StartTempControlPlane starts etcd and the API server in a new temporary
// directory, for benchmark programs, with modify applied to the options;
// stop stops them, cleans up the node and removes the directory.
func StartTempControlPlane(ctx context.Context, out io.Writer, modify ...func(*controlplane.Options)) (cp *controlplane.ControlPlane, stop func(), err error) {
	dir, err := os.MkdirTemp("", "steadyplane-bench-")
	if err != nil {
		return nil, nil, err
	}
	o, err := ControlPlaneOptions(filepath.Join(dir, "sp"), out)
	for _, m := range modify {
		m(&o)
	}
	if err == nil {
		cp, err = StartControlPlane(ctx, o)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return cp, func() {
		cp.Stop()
		cp.Close()
		CleanNode(filepath.Join(o.DataDir, "node"))
		_ = exec.Command("ip", "link", "del", o.CNIBridge).Run()
		os.RemoveAll(dir)
	}, nil
}

// CleanNode ends what a node agent under rootDir may have left when it was
// killed: runc containers outlive their agent by design (a new agent adopts
// them), and pod namespaces stay pinned under rootDir. Tests call it after
// stopping the agent so that nothing outlives the test.
func CleanNode(rootDir string) {
	_, _ = runc.KillAll("", filepath.Join(rootDir, "runc"))
	_ = runtime.UnmountUnder(rootDir)
	if os.Geteuid() == 0 && podnet.IPTablesAvailable() {
		_ = podnet.RemoveMasqueradeOf(utiliptables.New(utiliptables.ProtocolIPv4), filepath.Join(rootDir, "cni", "net.conflist"))
	}
}

func ensureHostRuntimeClass(ctx context.Context, cp *controlplane.ControlPlane) error {
	cfg, err := cp.AdminConfig()
	if err != nil {
		return err
	}
	return controlplane.EnsureHostRuntimeClass(ctx, kubernetes.NewForConfigOrDie(cfg))
}

// HostRoot is the runtime class of test pods that run the host's programs
// (python3, sh, sleep) instead of an image.
func HostRoot() *string { return ptr.To(runtime.HostRuntimeClass) }
