package controlplane

import (
	"context"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	nodeutil "k8s.io/kubernetes/pkg/util/node"
	netutils "k8s.io/utils/net"

	"github.com/steadyplane/steadyplane/pkg/node/agent"
	"github.com/steadyplane/steadyplane/pkg/node/hostdeps"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// prepareNode issues the node agent's credentials (system:node:<name> in
// system:nodes, for the Node authorizer and NodeRestriction) and its
// process, once what the node needs of the machine is there.
func (cp *ControlPlane) prepareNode() error {
	if !cp.opts.Node {
		return nil
	}
	kubeconfig, err := cp.componentKubeconfig("node-"+cp.opts.NodeName, "system:node:"+cp.opts.NodeName, "system:nodes")
	if err != nil {
		return err
	}
	cp.nodeKubeconfig = kubeconfig
	nodeIP := cp.addr.node()
	// The node API's serving certificate, for the address the API server
	// dials (the Node's InternalIP) and the node's name.
	serving, err := cp.issue(cp.dir.pkiDir(), cp.pki.KubeletCA, pki.CertSpec{
		Name: "node-" + cp.opts.NodeName + "-serving", CommonName: "system:node:" + cp.opts.NodeName,
		Organization: []string{"system:nodes"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{cp.opts.NodeName}, IPs: []net.IP{netutils.ParseIPSloppy(nodeIP)},
	})
	if err != nil {
		return err
	}
	for _, d := range []string{cp.dir.manifestsDir(), cp.dir.imagesDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	removeBinaryImageArchives(cp.dir.imagesDir())
	args := []string{"node", "--kubeconfig=" + kubeconfig, "--node-name=" + cp.opts.NodeName, "--node-ip=" + nodeIP,
		"--root-dir=" + cp.dir.nodeRoot(), "--pod-manifest-path=" + cp.dir.manifestsDir(),
		"--runtime=" + cp.opts.NodeRuntime, "--pod-cidr=" + cp.opts.PodCIDR, "--cni-bridge=" + cp.opts.CNIBridge,
		"--port=" + strconv.Itoa(cp.opts.NodeAPIPort), "--tls-cert-file=" + serving.CertPath, "--tls-private-key-file=" + serving.KeyPath,
		"--client-ca-file=" + cp.pki.CA.CertPath, "--image-import-dir=" + cp.dir.imagesDir(), "--registries-config=" + cp.dir.path("registries.yaml"),
		"--seccomp-default", "--pod-max-pids=" + strconv.Itoa(agent.DefaultPodPidsLimit), "--cluster-domain=" + cp.opts.ClusterDomain,
		"--stop-pods-on-exit=" + strconv.FormatBool(cp.opts.StopPodsOnExit)}
	if cp.opts.LocalStoragePath != "" {
		abs, err := filepath.Abs(cp.opts.LocalStoragePath)
		if err != nil {
			return err
		}
		args = append(args, "--local-storage-path="+abs)
	}
	if cp.opts.NodeRuntime != "process" {
		// The whole product or a clear stop: what the node needs from
		// the machine is installed (as root, with apt-get) before the
		// runtime is chosen.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		err := hostdeps.Ensure(ctx, hostdeps.Machine, cp.progressf)
		cancel()
		if err != nil {
			return err
		}
	}
	name, warning, err := runc.Choose(cp.opts.NodeRuntime)
	if err != nil {
		return err
	}
	cp.nodeRuntime = name
	if warning != "" {
		cp.progressf("WARNING: %s", warning)
	} else {
		cp.progressf("node: pods run under %s, pod addresses from %s", name, cp.opts.PodCIDR)
	}
	if cp.opts.NodeMetricsPort != 0 {
		args = append(args, "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(cp.opts.NodeMetricsPort))
	}
	cp.Node = &Process{Name: "node", Binary: cp.opts.Binary, Args: args, LogPath: cp.dir.log("node")}
	return nil
}

// binaryImageArchive names the archives of the binary's image that
// earlier releases wrote into the import directory for CoreDNS: the node
// agent would import each at every start, before its static pods.
var binaryImageArchive = regexp.MustCompile(`^steadyplane-[0-9a-f]{12}\.tar$`)

// removeBinaryImageArchives removes those archives; the image is added to
// the node's store directly now (images.Store.AddBinary).
func removeBinaryImageArchives(importDir string) {
	entries, _ := os.ReadDir(importDir)
	for _, e := range entries {
		if binaryImageArchive.MatchString(e.Name()) {
			_ = os.Remove(filepath.Join(importDir, e.Name()))
		}
	}
}

// WaitNodeReady waits until the node agent's Node is registered and Ready,
// then marks it a control-plane node (markControlPlane).
func (cp *ControlPlane) WaitNodeReady(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	err = cp.waitFor(ctx, nodeComponent, readyPoll, func(ctx context.Context) (bool, string) {
		n, err := client.CoreV1().Nodes().Get(ctx, cp.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if nodeutil.IsNodeReady(n) {
			return true, ""
		}
		return false, "Node not Ready"
	})
	if err == nil {
		cp.markControlPlane(ctx, client)
	}
	return err
}

// nodeStopGrace is how long the node agent may take to stop: the default
// pod grace period and some.
const nodeStopGrace = 45 * time.Second
