package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/steadyplane/steadyplane/pkg/controlplane"
)

// ControlPlaneOptions returns control plane options for a test: the given data
// directory, free loopback ports, a 1s Retry-After, and progress to out.
func ControlPlaneOptions(dataDir string, out io.Writer) (controlplane.Options, error) {
	bin, err := Binary()
	if err != nil {
		return controlplane.Options{}, err
	}
	ports, err := FreePorts(5)
	if err != nil {
		return controlplane.Options{}, err
	}
	o := *controlplane.NewOptions()
	o.DataDir = dataDir
	o.Binary = bin
	o.APIServerPort, o.EtcdClientPort, o.EtcdPeerPort, o.NodeMetricsPort, o.ReadinessWebhookPort = ports[0], ports[1], ports[2], ports[3], ports[4]
	o.RetryAfter = time.Second
	o.StopGrace = 20 * time.Second
	o.Out = out
	return o, nil
}

// StartControlPlane prepares a control plane and starts etcd and the API
// server, waiting for both to be ready. The caller must call Stop and Close.
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
	return cp, nil
}

// StartTempControlPlane starts etcd and the API server in a new temporary
// directory, for benchmark programs; stop stops them and removes the directory.
func StartTempControlPlane(ctx context.Context, out io.Writer) (cp *controlplane.ControlPlane, stop func(), err error) {
	dir, err := os.MkdirTemp("", "steadyplane-bench-")
	if err != nil {
		return nil, nil, err
	}
	o, err := ControlPlaneOptions(filepath.Join(dir, "sp"), out)
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
		os.RemoveAll(dir)
	}, nil
}
