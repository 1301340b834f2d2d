package controlplane

import (
	"path/filepath"

	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
	"github.com/steadyplane/steadyplane/pkg/join"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// layout is a server's data directory (its absolute path): where each of
// its files is. It decides nothing and touches no file.
type layout string

// path is elem under the data directory.
func (d layout) path(elem ...string) string {
	return filepath.Join(append([]string{string(d)}, elem...)...)
}

// pkiDir holds the CAs, certificates and keys.
func (d layout) pkiDir() string { return d.path("pki") }

// manifestsDir is the node agent's static pod manifests.
func (d layout) manifestsDir() string { return d.path("manifests") }

// manifest is where the named component's static pod is written.
func (d layout) manifest(name string) string { return d.path("manifests", name+".yaml") }

// log is the named child process's log.
func (d layout) log(name string) string { return d.path("logs", name+".log") }

// credentials is the named component's directory: its kubeconfig, and
// the client certificate and key the kubeconfig names. Its pod mounts it,
// and nothing else of the PKI unless it needs to: a directory, not files,
// so that a renewed certificate (a new file in its place) is seen inside.
func (d layout) credentials(name string) string { return d.path(pki.CredentialsDir, name) }

// kubeconfig is the named component's kubeconfig.
func (d layout) kubeconfig(name string) string {
	return filepath.Join(d.credentials(name), "kubeconfig")
}

// legacyKubeconfig is where a release before credentials/ kept it.
func (d layout) legacyKubeconfig(name string) string { return d.path(name + ".kubeconfig") }

// adminKubeconfig has the admin credentials (system:masters).
func (d layout) adminKubeconfig() string { return d.path(join.AdminKubeconfig) }

// etcdData is etcd's data.
func (d layout) etcdData() string { return d.path("etcd") }

// binDir holds the installed binaries the static pods run.
func (d layout) binDir() string { return d.path("bin") }

// nodeRoot is the node agent's root directory: pods, container logs, its
// image store.
func (d layout) nodeRoot() string { return d.path("node") }

// imagesDir is where image archives dropped by hand are imported from at
// every start of the node agent (as k3s's agent/images).
func (d layout) imagesDir() string { return d.path("images") }

// apiserverConfigDir holds the API server's admission and secrets
// encryption configuration.
func (d layout) apiserverConfigDir() string { return d.path("apiserver-config") }

// encryptionConfig is the API server's secrets encryption configuration.
func (d layout) encryptionConfig() string {
	return filepath.Join(d.apiserverConfigDir(), encryptionFile)
}

// apiserverCerts is the API server's --cert-dir.
func (d layout) apiserverCerts() string { return d.path("apiserver-certs") }

// apiserverRevisions is the API server's revisions on this node.
func (d layout) apiserverRevisions() revisions.Layout {
	return revisions.ForDataDir(string(d), operator.Operand)
}
