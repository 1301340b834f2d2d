package altsvcclient

import (
	"errors"
	"fmt"
	"net/http"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"

	"github.com/steadyplane/steadyplane/pkg/ifready/ifreadyclient"
)

// AuthProviderName is the kubeconfig auth provider that turns both client
// options on for programs that build their client from a kubeconfig with
// client-go and offer no other hook (upstream kube-proxy, CoreDNS): in a
// binary that called RegisterAuthProvider, a user entry with
//
//	auth-provider:
//	  name: steadyplane-alternative-services
//	  config:
//	    kubeconfig: /path/of/this/kubeconfig
//
// fails over between the API servers its cluster's
// steadyplane.io/alternative-services extension lists, and sends
// X-Kubernetes-If-Ready. It authenticates nothing: the entry's token or
// client certificate does. Other programs (kubectl) refuse the kubeconfig,
// so only steadyplane's own components get one.
const AuthProviderName = "steadyplane-alternative-services"

// AuthProviderKubeconfig is the provider's config key naming the kubeconfig
// that holds the alternatives (client-go gives a provider its config, not
// the file it came from).
const AuthProviderKubeconfig = "kubeconfig"

var (
	registerOnce sync.Once
	registerErr  error
	// providerRegistry holds the failover state of every client the
	// provider makes in this process.
	providerRegistry = NewRegistry(Options{})
)

// RegisterAuthProvider registers AuthProviderName with client-go, once per
// process.
func RegisterAuthProvider() error {
	registerOnce.Do(func() { registerErr = rest.RegisterAuthProviderPlugin(AuthProviderName, newAuthProvider) })
	return registerErr
}

// newAuthProvider is the provider for the cluster at clusterAddress: its
// alternatives and CA from the kubeconfig the config names.
func newAuthProvider(clusterAddress string, config map[string]string, _ rest.AuthProviderConfigPersister) (rest.AuthProvider, error) {
	path := config[AuthProviderKubeconfig]
	if path == "" {
		return nil, fmt.Errorf("auth provider %s: its config has no %q (the kubeconfig listing the API servers)", AuthProviderName, AuthProviderKubeconfig)
	}
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth provider %s: %w", AuthProviderName, err)
	}
	cluster, err := clusterOf(raw, clusterAddress)
	if err != nil {
		return nil, fmt.Errorf("auth provider %s: %s: %w", AuthProviderName, path, err)
	}
	hosts, err := HostsForServer(raw, clusterAddress)
	if err != nil {
		return nil, fmt.Errorf("auth provider %s: %s: %w", AuthProviderName, path, err)
	}
	// The CA the alternatives must prove themselves with is the
	// cluster's; the provider's own client is not built from the
	// kubeconfig, whose user names this provider again.
	cfg := &rest.Config{Host: clusterAddress, TLSClientConfig: rest.TLSClientConfig{CAFile: cluster.CertificateAuthority, CAData: cluster.CertificateAuthorityData}}
	if cluster.InsecureSkipTLSVerify {
		cfg.Insecure = true
	}
	if _, err := providerRegistry.Enable(cfg, hosts); err != nil {
		return nil, fmt.Errorf("auth provider %s: %w", AuthProviderName, err)
	}
	ifreadyclient.Enable(cfg)
	return authProvider{wrap: cfg.WrapTransport}, nil
}

// clusterOf finds the kubeconfig's cluster entry for server.
func clusterOf(raw *clientcmdapi.Config, server string) (*clientcmdapi.Cluster, error) {
	want, err := originOf(server)
	if err != nil {
		return nil, err
	}
	for _, c := range raw.Clusters {
		if c == nil {
			continue
		}
		if got, err := originOf(c.Server); err == nil && got == want {
			return c, nil
		}
	}
	return nil, errors.New("no cluster has server " + server)
}

type authProvider struct{ wrap transport.WrapperFunc }

func (p authProvider) WrapTransport(rt http.RoundTripper) http.RoundTripper { return p.wrap(rt) }

func (authProvider) Login() error { return nil }
