// Package node is "steadyplane node": a node agent as a command line
// describes it, on this machine. Run chooses the container runtime (runc
// and the pod network, or host processes), opens the image store, and for
// a worker (--server) joins the cluster (package join), writes its
// kube-proxy (package addons/kubeproxy) and finds the cluster's DNS
// (package addons/coredns); then it runs the agent (package agent) until
// its context ends.
//
// The agent's own pieces are in the folders below: agent (the Node, its
// pods, static pods), podworker (one pod's life), lifecycle of containers
// in podworker, runtime/ (runc, processes), podnet (CNI), images, volume,
// kubeletapi (logs, exec, port-forward), podstatus, probe, staticpod.
package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"

	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/fallback/release"
	"github.com/steadyplane/steadyplane/pkg/join"
	"github.com/steadyplane/steadyplane/pkg/node/agent"
	"github.com/steadyplane/steadyplane/pkg/node/images"
	"github.com/steadyplane/steadyplane/pkg/node/podnet"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/process"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
)

// Config is a node agent as "steadyplane node" is told to run it.
type Config struct {
	// Agent is the agent's options as the flags set them; Run completes
	// its runtime, network, images and credentials.
	Agent agent.Options
	// Kubeconfig has the node's credentials; "" with Server.
	Kubeconfig string
	// Runtime is runc, process or auto.
	Runtime string
	// Network is the pod network (its range and bridge).
	Network podnet.Config
	// ImageStore is the image store's directory ("" for
	// <root-dir>/image-store); ImageImportDir is imported at start ("" for
	// none); RegistriesFile is the node's registries file.
	ImageStore, ImageImportDir, RegistriesFile string
	// LogMaxSize and LogMaxFiles rotate container logs.
	LogMaxSize  int64
	LogMaxFiles int
	// EvictionHard are the hard eviction thresholds, by signal.
	EvictionHard map[string]string
	// APIPort is the node API's port on the node IP; 0 for none.
	APIPort int
	// Server, with Token or TokenFile, joins a cluster as a worker.
	Server, Token, TokenFile string
	// Proxy and ProxyMode are a worker's kube-proxy.
	Proxy     bool
	ProxyMode string
	// Out receives progress lines.
	Out io.Writer
}

func (c *Config) printf(format string, args ...any) {
	if c.Out != nil {
		fmt.Fprintf(c.Out, format+"\n", args...)
	}
}

// agentGCPercent is the node agent's GOGC unless the environment sets one:
// its live heap is small and it runs for months beside the pods, so half
// the usual headroom (bench/node, 100 pods: 35 MiB of its own instead of
// 43, for no measurable CPU).
const agentGCPercent = 50

// Run runs the node agent c describes until ctx ends.
func Run(ctx context.Context, c Config) error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(agentGCPercent)
	}
	o := &c.Agent
	if c.Server != "" {
		// Static pods name their files by absolute path.
		root, err := filepath.Abs(o.RootDir)
		if err != nil {
			return err
		}
		o.RootDir = root
		if err := os.MkdirAll(root, 0o700); err != nil {
			return err
		}
		if err := c.runFromRootDir(); err != nil {
			return err
		}
	}
	err := c.run(ctx)
	switch {
	case ctx.Err() != nil && c.Server != "":
		// Stopped while starting: no verdict on a move.
		release.RequeueStopped(o.RootDir, c.printf)
	case err != nil:
		// The first start of a move that fails hands back.
		return c.handBack(err)
	}
	return err
}

// run runs the agent once Run chose the binary.
func (c *Config) run(ctx context.Context) error {
	o := &c.Agent
	var proxyKubeconfig string
	var worker *join.Worker
	if c.Server != "" {
		var creds *join.WorkerCredentials
		var err error
		worker, creds, err = c.joinWorker(ctx)
		if err != nil {
			return err
		}
		c.Kubeconfig, o.TLSCertFile, o.TLSKeyFile, o.ClientCAFile, c.Network.PodCIDR = creds.Kubeconfig, creds.CertFile, creds.KeyFile, creds.CAFile, creds.PodCIDR
		proxyKubeconfig = creds.ProxyKubeconfig
	} else if c.Kubeconfig == "" {
		return fmt.Errorf("--kubeconfig, or --server with --token or --token-file, is required")
	}
	// Both client options: fail over between API servers, wait out one
	// that is initializing.
	cfg, _, err := clientconfig.Load(c.Kubeconfig, clientconfig.Options{AltSvc: altsvcclient.Options{CacheDir: filepath.Join(o.RootDir, "alternative-services")}})
	if err != nil {
		return err
	}
	if c.LogMaxFiles < 1 {
		return fmt.Errorf("--container-log-max-files=%d: want at least 1", c.LogMaxFiles)
	}
	if err := c.setUpRuntime(); err != nil {
		return err
	}
	if err := c.setUpImages(); err != nil {
		return err
	}
	if c.Server != "" {
		if err := c.setUpWorker(ctx, cfg, proxyKubeconfig); err != nil {
			return err
		}
	}
	if o.EvictionHard, err = agent.ParseEvictionHard(c.EvictionHard); err != nil {
		return err
	}
	switch {
	case c.APIPort < 0 || c.APIPort > 65535:
		return fmt.Errorf("--port=%d is not a port", c.APIPort)
	case c.APIPort == 0:
	case o.TLSCertFile == "" || o.TLSKeyFile == "" || o.ClientCAFile == "":
		klog.InfoS("WARNING: no --tls-cert-file, --tls-private-key-file and --client-ca-file: the node API is off, so kubectl logs, exec, attach and port-forward cannot reach this node's pods")
	default:
		o.APIAddress = net.JoinHostPort(o.NodeIP, strconv.Itoa(c.APIPort))
	}
	a, err := agent.New(cfg, *o)
	if err != nil {
		return err
	}
	if worker != nil {
		agent.RegisterMetrics(join.WorkerCollectors()...)
		go worker.KeepRenewed(ctx, cfg)
		go c.followRelease(ctx, cfg)
	}
	return a.Run(ctx)
}

// setUpRuntime chooses the container runtime and, for runc, the pod
// network.
func (c *Config) setUpRuntime() error {
	o := &c.Agent
	name, warning, err := runc.Choose(c.Runtime)
	if err != nil {
		return err
	}
	if warning != "" {
		klog.Warningf("Node agent: %s", warning)
		fmt.Fprintf(os.Stderr, "WARNING: %s\n", warning)
	}
	if name == "process" {
		o.Runtime = process.Runtime{}
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	rt, err := runc.New(runc.Options{Root: filepath.Join(o.RootDir, "runc"), ExitHook: []string{self, "container-exited"},
		LogMaxSize: c.LogMaxSize, LogMaxFiles: c.LogMaxFiles})
	if err != nil {
		return err
	}
	net := c.Network
	net.IPAMDir, net.NAT = filepath.Join(o.RootDir, "cni", "ipam"), podnet.IPTablesAvailable()
	network, err := podnet.New(net, filepath.Join(o.RootDir, "cni", "net.conflist"), filepath.Join(o.RootDir, "cni", "cache"))
	if err != nil {
		return err
	}
	o.Runtime, o.Network = rt, network
	return nil
}

// setUpImages opens the node's image store; the agent imports the
// archives of the import directory once it runs, without holding its
// static pods back.
func (c *Config) setUpImages() error {
	o := &c.Agent
	if !o.Runtime.Isolated() {
		return nil // host processes run host commands; images are not used
	}
	regs, err := images.LoadRegistries(c.RegistriesFile)
	if err != nil {
		return err
	}
	o.Registries = regs
	storeDir := c.ImageStore
	if storeDir == "" {
		storeDir = images.StoreDir(o.RootDir)
	}
	store, err := images.Open(storeDir)
	if err != nil {
		return err
	}
	o.Images, o.ImageImportDir = store, c.ImageImportDir
	return nil
}

// joinWorker gets a worker node's credentials from the cluster of
// c.Server with the join token (join.Bootstrap).
func (c *Config) joinWorker(ctx context.Context) (*join.Worker, *join.WorkerCredentials, error) {
	tok, err := join.ReadToken(c.Token, c.TokenFile)
	if err != nil {
		return nil, nil, err
	}
	w := &join.Worker{Server: c.Server, Token: tok, Dir: filepath.Join(c.Agent.RootDir, "bootstrap"),
		NodeName: c.Agent.NodeName, NodeIP: c.Agent.NodeIP, Logf: c.printf}
	creds, err := join.Bootstrap(ctx, *w)
	return w, creds, err
}
