package podworker

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestHostsFile: the pod's /etc/hosts as the kubelet writes it, with the
// header clients tell a managed file by.
func TestHostsFile(t *testing.T) {
	aliases := []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo", "bar"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{HostAliases: aliases}}
	node := []byte("127.0.0.1 localhost\n192.0.2.2 machine\n")
	for _, tc := range []struct {
		name        string
		hostNetwork bool
		want        string
	}{
		{"pod network", false, "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
			"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n" +
			"10.244.0.5\tweb\nfd00::5\tweb\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo\tbar\n"},
		{"host network: the node's file", true, "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n192.0.2.2 machine\n" +
			"\n# Entries added by HostAliases.\n10.1.2.3\tfoo\tbar\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod.DeepCopy()
			p.Spec.HostNetwork = tc.hostNetwork
			if got := string(hostsFile(p, []string{"10.244.0.5", "fd00::5"}, podNames{hostname: "web", kernel: "web"}, node)); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	if got := string(hostsFile(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, []string{"10.0.0.1"}, podNames{hostname: "p", kernel: "p"}, nil)); strings.Contains(got, "HostAliases") {
		t.Errorf("no aliases, yet a section for them:\n%s", got)
	}
}

// TestHostsFileWithSubdomain: a pod with a subdomain is named in its domain
// first, as the kubelet's managedHostsFileContent.
func TestHostsFileWithSubdomain(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop"}, Spec: corev1.PodSpec{Hostname: "web-0", Subdomain: "web"}}
	names, err := namesOf(pod, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	got := string(hostsFile(pod, []string{"10.244.0.5"}, names, nil))
	if want := "10.244.0.5\tweb-0.web.shop.svc.cluster.local\tweb-0\n"; !strings.HasSuffix(got, want) {
		t.Errorf("got\n%s\nwant it to end with %q", got, want)
	}
}
