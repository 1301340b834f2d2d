package kubeproxy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// Pod is kube-proxy's static pod: privileged (it programs the node's packet
// filter), its kubeconfig read-only, and the host's xtables lock, which
// iptables mode takes as every iptables user on the machine does.
func Pod(binary string, args []string, kubeconfig string) staticpod.Spec {
	// The kubeconfig's directory, not the file: it names the client
	// certificate beside it, which is renewed (replaced) while it runs.
	return staticpod.Spec{Name: Name, Binary: binary, Args: args, Privileged: true,
		HostPaths: []staticpod.HostPath{{Path: filepath.Dir(kubeconfig), ReadOnly: true}, {Path: "/run/xtables.lock", File: true}}}
}

// Preflight chooses kube-proxy's mode on this machine (ChooseModeHere) and
// refuses a kube-proxy of another program in this network namespace: the
// two would overwrite each other's rules. ownDir is the directory of this
// run's files (a process naming it is ours); off says how to run without
// kube-proxy instead.
func Preflight(ownDir, requested, off string, lookPath func(string) (string, error)) (mode, warning string, err error) {
	if pids := othersRunning(ownDir); len(pids) > 0 {
		return "", "", fmt.Errorf("another kube-proxy runs in this network namespace (pid %v): two would overwrite each other's rules in the machine's packet filter; stop it, or pass %s", pids, off)
	}
	return ChooseModeHere(requested, lookPath)
}

// othersRunning are the kube-proxies in this network namespace that are not
// ownDir's: upstream's binary, or another steadyplane's "proxy".
func othersRunning(ownDir string) []int {
	pids := procfs.Find(func(argv []string) bool {
		if len(argv) == 0 || strings.Contains(strings.Join(argv, "\x00"), ownDir+"/") {
			return false
		}
		base := filepath.Base(argv[0])
		return base == Name || len(argv) > 1 && argv[1] == "proxy" && strings.HasPrefix(base, "steadyplane")
	})
	// One in another network namespace (another host on this machine)
	// has a packet filter of its own.
	return slices.DeleteFunc(pids, func(pid int) bool { return !procfs.SameNetNS(pid) })
}

// Worker is a worker node's kube-proxy (steadyplane node --server).
type Worker struct {
	// Enabled runs it; false removes the manifest an earlier start wrote.
	Enabled bool
	// ManifestDir is the agent's manifest directory.
	ManifestDir string
	// Binary is the installed binary the pod runs.
	Binary string
	// Mode is auto, nftables or iptables.
	Mode string
	// Kubeconfig has the node's own credentials: the API servers bind
	// system:node-proxier to the group of nodes.
	Kubeconfig string
	// NodeName and NodeIP are the node's.
	NodeName, NodeIP string
}

// WriteWorker writes, or without Enabled removes, a worker's kube-proxy
// static pod in w.ManifestDir. The worker takes the node's pod range as
// local (it does not know the cluster's) and upstream's ports. It returns
// the mode chosen and a warning about it.
func WriteWorker(w Worker, lookPath func(string) (string, error)) (mode, warning string, err error) {
	manifest := filepath.Join(w.ManifestDir, ManifestFile)
	if !w.Enabled {
		if err := os.Remove(manifest); err != nil && !os.IsNotExist(err) {
			return "", "", err
		}
		return "", "", nil
	}
	mode, warning, err = Preflight(filepath.Dir(w.Kubeconfig), w.Mode, "--proxy=false", lookPath)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(w.ManifestDir, 0o700); err != nil {
		return "", "", err
	}
	args := Args(Config{Kubeconfig: w.Kubeconfig, NodeName: w.NodeName, Mode: mode, NodeIP: w.NodeIP,
		HealthzPort: DefaultHealthzPort, MetricsPort: DefaultMetricsPort})
	return mode, warning, staticpod.Write(w.ManifestDir, Pod(w.Binary, args, w.Kubeconfig).Pod())
}
