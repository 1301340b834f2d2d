// Package kubeproxy is everything steadyplane knows about kube-proxy,
// upstream's, which "steadyplane proxy" runs: the mode a machine gets
// (nftables or iptables), its arguments, its static pod on a server (up)
// and on a worker (node --server), and its health check; package rules
// removes the rules it leaves behind ("steadyplane cleanup").
package kubeproxy

import (
	"os"
	"path/filepath"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

// Name is kube-proxy's component and static pod name.
const Name = "kube-proxy"

// User is kube-proxy's identity: upstream's bootstrap policy binds it to
// the system:node-proxier ClusterRole (watch Services, Endpoints,
// EndpointSlices, ServiceCIDRs and Nodes; write Events), and nothing more.
const User = "system:kube-proxy"

// kube-proxy's ports by default, as upstream's: /healthz on the node's
// address, metrics on 127.0.0.1.
const (
	DefaultHealthzPort = 10256
	DefaultMetricsPort = 10249
)

// KubeconfigFile is the name of a worker's kube-proxy kubeconfig in its
// bootstrap directory, and was a server's in its data directory before
// servers kept it in ServerKubeconfig: its presence tells that the
// directory ran a kube-proxy.
const KubeconfigFile = Name + ".kubeconfig"

// ServerKubeconfig is where a server keeps kube-proxy's kubeconfig, under
// its data directory (its credentials directory).
var ServerKubeconfig = filepath.Join(pki.CredentialsDir, Name, "kubeconfig")

// ManifestFile is the name of kube-proxy's static pod manifest.
const ManifestFile = Name + ".yaml"

// Ran reports whether the data directory dir ran a kube-proxy (its
// kubeconfig is there): the rules it left are then ours to remove
// (package rules).
func Ran(dir string) bool {
	for _, f := range []string{ServerKubeconfig, KubeconfigFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}
