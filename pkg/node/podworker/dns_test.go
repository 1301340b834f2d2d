package podworker

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/kubernetes/pkg/kubelet/network/dns"
	"k8s.io/utils/ptr"
)

func TestPodNames(t *testing.T) {
	long := strings.Repeat("h", 40)
	tests := []struct {
		name                     string
		spec                     corev1.PodSpec
		hostname, domain, kernel string
		errHas                   string
	}{
		{name: "the pod's name", hostname: "web-0", kernel: "web-0"},
		{name: "spec.hostname", spec: corev1.PodSpec{Hostname: "db"}, hostname: "db", kernel: "db"},
		{name: "a subdomain: a domain in the namespace's services", spec: corev1.PodSpec{Hostname: "db", Subdomain: "dbs"},
			hostname: "db", domain: "dbs.shop.svc.cluster.local", kernel: "db"},
		{name: "setHostnameAsFQDN: the kernel's name is the FQDN", spec: corev1.PodSpec{Hostname: "db", Subdomain: "dbs", SetHostnameAsFQDN: ptr.To(true)},
			hostname: "db", domain: "dbs.shop.svc.cluster.local", kernel: "db.dbs.shop.svc.cluster.local"},
		{name: "setHostnameAsFQDN without a subdomain: the short name", spec: corev1.PodSpec{Hostname: "db", SetHostnameAsFQDN: ptr.To(true)},
			hostname: "db", kernel: "db"},
		{name: "an FQDN over 64 characters: the kubelet's error", spec: corev1.PodSpec{Hostname: long, Subdomain: "dbs", SetHostnameAsFQDN: ptr.To(true)},
			errHas: "too long"},
		{name: "hostnameOverride wins, without a domain", spec: corev1.PodSpec{HostnameOverride: ptr.To("custom.example"), Subdomain: "dbs"},
			hostname: "custom.example", kernel: "custom.example"},
		{name: "an invalid subdomain", spec: corev1.PodSpec{Subdomain: "Not_A_Label"}, errHas: "not a valid DNS label"},
	}
	for _, tc := range tests {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop"}, Spec: tc.spec}
		got, err := namesOf(pod, "cluster.local")
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s: %+v, %v; want an error containing %q", tc.name, got, err, tc.errHas)
			}
			continue
		}
		if err != nil || got != (podNames{hostname: tc.hostname, domain: tc.domain, kernel: tc.kernel}) {
			t.Errorf("%s: %+v, %v; want hostname %q, domain %q, kernel %q", tc.name, got, err, tc.hostname, tc.domain, tc.kernel)
		}
	}
}

// TestPodDNS: each DNS policy through the kubelet's configurer, written as
// the pod's resolv.conf.
func TestPodDNS(t *testing.T) {
	host := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(host, []byte("nameserver 192.0.2.53\nsearch lab.example\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clusterFirst := "search shop.svc.cluster.local svc.cluster.local cluster.local lab.example\nnameserver 10.96.0.10\noptions ndots:5\n"
	def := "search lab.example\nnameserver 192.0.2.53\noptions edns0\n"
	tests := []struct {
		name   string
		policy corev1.DNSPolicy
		hostNW bool
		config *corev1.PodDNSConfig
		dns    []net.IP
		want   string
		event  string
	}{
		{name: "ClusterFirst: the cluster's server, search path and ndots:5", policy: corev1.DNSClusterFirst, dns: []net.IP{net.ParseIP("10.96.0.10")}, want: clusterFirst},
		{name: "ClusterFirst on the host network: the node's resolver", policy: corev1.DNSClusterFirst, hostNW: true, dns: []net.IP{net.ParseIP("10.96.0.10")}, want: def},
		{name: "ClusterFirstWithHostNet on the host network: the cluster's", policy: corev1.DNSClusterFirstWithHostNet, hostNW: true, dns: []net.IP{net.ParseIP("10.96.0.10")}, want: clusterFirst},
		{name: "Default: the node's resolver", policy: corev1.DNSDefault, dns: []net.IP{net.ParseIP("10.96.0.10")}, want: def},
		{name: "None: only the pod's dnsConfig", policy: corev1.DNSNone, dns: []net.IP{net.ParseIP("10.96.0.10")},
			config: &corev1.PodDNSConfig{Nameservers: []string{"203.0.113.1"}, Searches: []string{"a.example"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}}},
			want:   "search a.example\nnameserver 203.0.113.1\noptions ndots:2\n"},
		{name: "ClusterFirst and dnsConfig: merged", policy: corev1.DNSClusterFirst, dns: []net.IP{net.ParseIP("10.96.0.10")},
			config: &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}, {Name: "single-request"}}},
			want:   "search shop.svc.cluster.local svc.cluster.local cluster.local lab.example\nnameserver 10.96.0.10\noptions ndots:1 single-request\n"},
		{name: "ClusterFirst without cluster DNS: Default, and an event", policy: corev1.DNSClusterFirst, want: def, event: "MissingClusterDNS"},
	}
	for _, tc := range tests {
		rec := record.NewFakeRecorder(10)
		c := dns.NewConfigurer(rec, &corev1.ObjectReference{Kind: "Node", Name: "n1"}, []net.IP{net.ParseIP("10.244.0.1")}, tc.dns, "cluster.local", host)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop"}, Spec: corev1.PodSpec{DNSPolicy: tc.policy, HostNetwork: tc.hostNW, DNSConfig: tc.config}}
		got, err := podDNS(context.Background(), c, pod)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: got\n%s(err %v)\nwant\n%s", tc.name, got, err, tc.want)
		}
		var events []string
		for len(rec.Events) > 0 {
			events = append(events, <-rec.Events)
		}
		if (tc.event == "") != (len(events) == 0) || tc.event != "" && !strings.Contains(strings.Join(events, "\n"), tc.event) {
			t.Errorf("%s: events %q, want %q", tc.name, events, tc.event)
		}
	}
	if _, err := podDNS(context.Background(), nil, &corev1.Pod{}); err == nil {
		t.Error("no configurer: want an error, not a panic")
	}
}
