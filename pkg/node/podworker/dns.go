package podworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/network/dns"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
)

// podNames are a pod's host name and DNS domain as the kubelet makes them,
// and the name its UTS namespace gets.
type podNames struct {
	// hostname is spec.hostname (or hostnameOverride), else the pod's
	// name, cut to 63 characters.
	hostname string
	// domain is <subdomain>.<namespace>.svc.<cluster domain> for a pod with
	// a subdomain, else "".
	domain string
	// kernel is the UTS host name: hostname, or hostname.domain with
	// setHostnameAsFQDN.
	kernel string
}

// namesOf is the kubelet's GeneratePodHostNameAndDomain and
// GetNodenameForKernel for pod in clusterDomain.
func namesOf(pod *corev1.Pod, clusterDomain string) (podNames, error) {
	if utilfeature.DefaultFeatureGate.Enabled(features.HostnameOverride) && pod.Spec.HostnameOverride != nil {
		h := *pod.Spec.HostnameOverride
		if msgs := utilvalidation.IsDNS1123Subdomain(h); len(msgs) != 0 {
			return podNames{}, fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", h, strings.Join(msgs, ";"))
		}
		h = truncateHostname(h)
		return podNames{hostname: h, kernel: h}, nil
	}
	n := podNames{hostname: pod.Name}
	if pod.Spec.Hostname != "" {
		if msgs := utilvalidation.IsDNS1123Label(pod.Spec.Hostname); len(msgs) != 0 {
			return podNames{}, fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", pod.Spec.Hostname, strings.Join(msgs, ";"))
		}
		n.hostname = pod.Spec.Hostname
	}
	n.hostname = truncateHostname(n.hostname)
	if pod.Spec.Subdomain != "" {
		if msgs := utilvalidation.IsDNS1123Label(pod.Spec.Subdomain); len(msgs) != 0 {
			return podNames{}, fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", pod.Spec.Subdomain, strings.Join(msgs, ";"))
		}
		n.domain = fmt.Sprintf("%s.%s.svc.%s", pod.Spec.Subdomain, pod.Namespace, clusterDomain)
	}
	kernel, err := kubeletutil.GetNodenameForKernel(n.hostname, n.domain, pod.Spec.SetHostnameAsFQDN)
	if err != nil {
		return podNames{}, err
	}
	n.kernel = kernel
	return n, nil
}

// truncateHostname cuts h to 63 characters (HOST_NAME_MAX) without a
// trailing "-" or "." (a longer name made sethostname fail).
func truncateHostname(h string) string {
	if len(h) > maxHostnameLen {
		h = strings.TrimRight(h[:maxHostnameLen], "-.")
	}
	return h
}

// resolvConf renders a pod's DNS configuration as the runtime writes it
// into /etc/resolv.conf (containerd's and CRI-O's layout), its options
// sorted.
func resolvConf(c *runtimeapi.DNSConfig) []byte {
	var b strings.Builder
	if len(c.Searches) > 0 {
		b.WriteString("search " + strings.Join(c.Searches, " ") + "\n")
	}
	for _, s := range c.Servers {
		b.WriteString("nameserver " + s + "\n")
	}
	if len(c.Options) > 0 {
		// The configurer merges options through a map: sorted, the file
		// is the same at every write (order means nothing to resolvers).
		b.WriteString("options " + strings.Join(slices.Sorted(slices.Values(c.Options)), " ") + "\n")
	}
	return []byte(b.String())
}

// podDNS is the pod's resolv.conf by its dnsPolicy and dnsConfig, from the
// kubelet's own configurer (ClusterFirst with the cluster's DNS servers and
// search path, ndots:5; Default the node's resolver file; None only the
// pod's dnsConfig; a hostNetwork pod's ClusterFirst is Default unless
// ClusterFirstWithHostNet).
func podDNS(ctx context.Context, c *dns.Configurer, pod *corev1.Pod) ([]byte, error) {
	if c == nil {
		return nil, errors.New("the node agent's DNS configuration is not set up yet")
	}
	cfg, err := c.GetPodDNS(ctx, pod)
	if err != nil {
		return nil, err
	}
	return resolvConf(cfg), nil
}
