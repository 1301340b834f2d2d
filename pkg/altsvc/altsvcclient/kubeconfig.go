package altsvcclient

import (
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigExtension names the kubeconfig cluster extension that lists a
// cluster's API servers, as host:port, for clients to fail over to before
// they have heard any Alt-Svc header:
//
//	clusters:
//	- name: steadyplane
//	  cluster:
//	    server: https://10.0.0.1:6443
//	    extensions:
//	    - name: steadyplane.io/alternative-services
//	      extension: ["10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"]
const KubeconfigExtension = "steadyplane.io/alternative-services"

// SetKubeconfigHosts records hosts in c's extension; no hosts removes it.
// Each host must be host:port or an https URL.
func SetKubeconfigHosts(c *clientcmdapi.Cluster, hosts []string) error {
	if len(hosts) == 0 {
		delete(c.Extensions, KubeconfigExtension)
		return nil
	}
	normalized := make([]string, 0, len(hosts))
	for _, h := range hosts {
		a, err := normalizeHost(h)
		if err != nil {
			return err
		}
		if !contains(normalized, a) {
			normalized = append(normalized, a)
		}
	}
	raw, err := json.Marshal(normalized)
	if err != nil {
		return err
	}
	if c.Extensions == nil {
		c.Extensions = map[string]runtime.Object{}
	}
	c.Extensions[KubeconfigExtension] = &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}
	return nil
}

// KubeconfigHosts returns the hosts c's extension lists, nil if it has none.
// The extension is a list of host:port strings; an object {"hosts": [...]}
// is read too. Anything else is an error naming what was found.
func KubeconfigHosts(c *clientcmdapi.Cluster) ([]string, error) {
	obj, ok := c.Extensions[KubeconfigExtension]
	if !ok || obj == nil {
		return nil, nil
	}
	var raw []byte
	switch o := obj.(type) {
	case *runtime.Unknown:
		raw = o.Raw
	default:
		b, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig extension %s: %w", KubeconfigExtension, err)
		}
		raw = b
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		var wrapped struct {
			Hosts []string `json:"hosts"`
		}
		if err2 := json.Unmarshal(raw, &wrapped); err2 != nil || wrapped.Hosts == nil {
			return nil, fmt.Errorf("kubeconfig extension %s: want a list of host:port, got %.100s", KubeconfigExtension, raw)
		}
		list = wrapped.Hosts
	}
	out := make([]string, 0, len(list))
	for _, h := range list {
		a, err := normalizeHost(h)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig extension %s: %w", KubeconfigExtension, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// HostsForServer returns the alternatives a kubeconfig lists for the cluster
// whose server is server (the Host of the rest.Config built from it): the
// extension of the first such cluster that has one. Matching on the server
// finds the right cluster whatever --context or --cluster chose.
func HostsForServer(cfg *clientcmdapi.Config, server string) ([]string, error) {
	want, err := originOf(server)
	if err != nil {
		return nil, err
	}
	for name, c := range cfg.Clusters {
		if c == nil {
			continue
		}
		if got, err := originOf(c.Server); err != nil || got != want {
			continue
		}
		hosts, err := KubeconfigHosts(c)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", name, err)
		}
		if len(hosts) > 0 {
			return hosts, nil
		}
	}
	return nil, nil
}

// ServiceAccountDir is where a pod finds its service account's token and
// the cluster's CA.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// PodKubeconfig is the kubeconfig of an add-on that runs in a pod (CoreDNS,
// metrics-server) and reaches the API servers with client-go alone: its
// service account's token and CA as the pod has them, server and the
// alternatives to fail over between, and this package's auth provider,
// which reads the kubeconfig again at path (where the pod mounts it) to do
// it. user names the credentials; the one context is "steadyplane".
func PodKubeconfig(server string, alternatives []string, user, path string) (string, error) {
	const context = "steadyplane"
	cfg := clientcmdapi.NewConfig()
	cluster := &clientcmdapi.Cluster{Server: server, CertificateAuthority: ServiceAccountDir + "/ca.crt"}
	if err := SetKubeconfigHosts(cluster, alternatives); err != nil {
		return "", err
	}
	cfg.Clusters[context] = cluster
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{TokenFile: ServiceAccountDir + "/token",
		AuthProvider: &clientcmdapi.AuthProviderConfig{Name: AuthProviderName, Config: map[string]string{AuthProviderKubeconfig: path}}}
	cfg.Contexts[context] = &clientcmdapi.Context{Cluster: context, AuthInfo: user}
	cfg.CurrentContext = context
	b, err := clientcmd.Write(*cfg)
	return string(b), err
}

// OrderedServers are the server and the alternatives an add-on's
// kubeconfig (PodKubeconfig) names for servers, the API servers that serve
// now (host:port): all of them in one order, so that servers of one
// release that see the same list write the same objects. ok is false for
// no servers.
func OrderedServers(servers []string) (server string, alternatives []string, ok bool) {
	if len(servers) == 0 {
		return "", nil, false
	}
	alternatives = slices.Sorted(slices.Values(servers))
	return "https://" + alternatives[0], alternatives, true
}
