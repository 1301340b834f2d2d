// Package clientconfig is the one way steadyplane's clients, its components
// and "steadyplane kubectl", get a *rest.Config: from a kubeconfig, with both
// of steadyplane's client options on.
//
//   - KEP-3028 (pkg/ifready/ifreadyclient): requests carry X-Kubernetes-If-Ready, so
//     a server still initializing refuses them with 503 + Retry-After instead
//     of answering wrongly.
//   - KEP-3037 (pkg/altsvc/altsvcclient): requests fail over between API servers,
//     starting from the kubeconfig's steadyplane.io/alternative-services
//     extension and learning the rest from Alt-Svc.
//
// Any client-go program can do the same:
//
//	cfg, pool, err := clientconfig.Load(kubeconfig, clientconfig.Options{})
package clientconfig

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/homedir"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/ifready/ifreadyclient"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// Options configure the client options.
type Options struct {
	// AltSvc tunes failover; its Hosts are added to those the kubeconfig
	// lists, and its CacheDir keeps learned hosts across restarts.
	AltSvc altsvcclient.Options
}

// DefaultCacheDir is where a user's learned API servers are kept: beside
// kubectl's discovery cache, in $KUBECACHEDIR or ~/.kube/cache, in
// alternative-services/.
func DefaultCacheDir() string {
	dir := os.Getenv("KUBECACHEDIR")
	if dir == "" {
		home := homedir.HomeDir()
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, clientcmd.RecommendedHomeDir, "cache")
	}
	return filepath.Join(dir, "alternative-services")
}

// Load reads the kubeconfig at path ("" for client-go's default loading
// rules: $KUBECONFIG, then ~/.kube/config) and returns its config with both
// options on, and the failover pool of its cluster.
func Load(path string, o Options) (*rest.Config, *altsvcclient.Pool, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, nil, err
	}
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, nil, err
	}
	pool, err := Apply(cfg, &raw, altsvcclient.NewRegistry(o.AltSvc), o.AltSvc.Hosts)
	if err != nil {
		return nil, nil, err
	}
	return cfg, pool, nil
}

// Apply turns both options on for cfg, built from the kubeconfig raw, with
// reg holding the failover state (one registry per process lets all its
// configs share it). extra are alternatives known besides the kubeconfig's.
func Apply(cfg *rest.Config, raw *clientcmdapi.Config, reg *altsvcclient.Registry, extra []string) (*altsvcclient.Pool, error) {
	hosts, err := altsvcclient.HostsForServer(raw, cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	pool, err := reg.Enable(cfg, append(hosts, extra...))
	if err != nil {
		return nil, err
	}
	ifreadyclient.Enable(cfg)
	return pool, nil
}

// WriteKubeconfig writes, atomically and 0600, a kubeconfig that reaches
// server trusting ca and authenticating with kp, and lists alternatives (the
// cluster's API servers, host:port) in its steadyplane.io/alternative-services
// extension.
func WriteKubeconfig(path, server, userName string, ca *pki.Authority, kp *pki.KeyPair, alternatives []string) error {
	return writeKubeconfig(path, pki.KubeconfigFor(server, userName, ca, kp), alternatives)
}

// WriteFileKubeconfig is WriteKubeconfig naming kp's files instead of
// holding them (pki.KubeconfigForFiles): what a component that runs while
// its certificate is renewed reads.
func WriteFileKubeconfig(path, server, userName string, ca *pki.Authority, kp *pki.KeyPair, alternatives []string) error {
	return writeKubeconfig(path, pki.KubeconfigForFiles(server, userName, ca, kp), alternatives)
}

func writeKubeconfig(path string, cfg *clientcmdapi.Config, alternatives []string) error {
	if err := altsvcclient.SetKubeconfigHosts(cfg.Clusters[pki.KubeconfigCluster], alternatives); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return pki.WriteKubeconfigFile(path, cfg)
}

// WriteProviderKubeconfig is WriteFileKubeconfig for a program that builds its
// client from the kubeconfig with client-go alone (upstream kube-proxy):
// its user names altsvcclient's auth provider, which turns both options on
// from this file. Only a binary that registered the provider can use it.
func WriteProviderKubeconfig(path, server, userName string, ca *pki.Authority, kp *pki.KeyPair, alternatives []string) error {
	cfg := pki.KubeconfigForFiles(server, userName, ca, kp)
	cfg.AuthInfos[userName].AuthProvider = &clientcmdapi.AuthProviderConfig{Name: altsvcclient.AuthProviderName,
		Config: map[string]string{altsvcclient.AuthProviderKubeconfig: path}}
	return writeKubeconfig(path, cfg, alternatives)
}
