package altsvcclient

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
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
