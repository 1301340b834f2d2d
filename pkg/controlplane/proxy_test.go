package controlplane

import (
	"slices"
	"strings"
	"testing"
)

func TestChooseProxyMode(t *testing.T) {
	tests := []struct {
		name, requested, kernel string
		nft, ipt                bool
		mode, errHas            string
		warns                   bool
	}{
		{name: "auto on a new kernel with nft: nftables", requested: "auto", kernel: "6.1.0-18-amd64", nft: true, ipt: true, mode: "nftables"},
		{name: "auto on exactly 5.13: nftables", requested: "auto", kernel: "5.13.0", nft: true, ipt: true, mode: "nftables"},
		{name: "auto on 5.10: iptables, with the warning", requested: "auto", kernel: "5.10.0-28-amd64", nft: true, ipt: true, mode: "iptables", warns: true},
		{name: "auto without nft: iptables", requested: "auto", kernel: "6.8.0", ipt: true, mode: "iptables", warns: true},
		{name: "auto with neither: a clear stop", requested: "auto", kernel: "6.8.0", errHas: "neither"},
		{name: "empty means auto", requested: "", kernel: "6.8.0", nft: true, mode: "nftables"},
		{name: "nftables asked on an old kernel: refused, naming the kernel", requested: "nftables", kernel: "4.19.0", nft: true, errHas: "4.19.0"},
		{name: "nftables asked without nft: refused, naming the package", requested: "nftables", kernel: "6.8.0", errHas: "nftables"},
		{name: "iptables asked: iptables, with the warning", requested: "iptables", kernel: "6.8.0", nft: true, ipt: true, mode: "iptables", warns: true},
		{name: "iptables asked without it", requested: "iptables", kernel: "6.8.0", nft: true, errHas: "Debian package iptables"},
		{name: "an unreadable kernel release is too old", requested: "auto", kernel: "", nft: true, ipt: true, mode: "iptables", warns: true},
		{name: "a mode kube-proxy has but up does not choose", requested: "ipvs", kernel: "6.8.0", nft: true, ipt: true, errHas: "auto, nftables or iptables"},
	}
	for _, tc := range tests {
		mode, warning, err := ChooseProxyMode(tc.requested, tc.kernel, tc.nft, tc.ipt)
		if mode != tc.mode || (warning != "") != tc.warns || (err != nil) != (tc.errHas != "") || err != nil && !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%s: mode %q, warning %q, err %v; want %q, warning %v, error containing %q", tc.name, mode, warning, err, tc.mode, tc.warns, tc.errHas)
		}
	}
}

func TestKernelAtLeast(t *testing.T) {
	min := [2]int{5, 13}
	for release, want := range map[string]bool{
		"5.13.0": true, "5.13": true, "6.0.0": true, "5.12.19": false, "4.20.0": false, "5.15.0-91-generic": true,
		"6.18.44-fc-v595": true, "5": false, "x.y": false, "5.13rc1": true, "": false,
	} {
		if got := kernelAtLeast(release, min); got != want {
			t.Errorf("kernelAtLeast(%q) = %v, want %v", release, got, want)
		}
	}
}

func TestOwnsNodeAddress(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Options)
		root   bool
		want   bool
	}{
		{"the defaults as root: an address on the pod bridge", func(*Options) {}, true, true},
		{"not root: no bridge can be made", func(*Options) {}, false, false},
		{"host processes: no pod network", func(o *Options) { o.NodeRuntime = "process" }, true, false},
		{"no node agent", func(o *Options) { o.Node = false }, true, false},
		{"a named bind address is used as given", func(o *Options) { o.BindAddress = "10.0.0.1" }, true, false},
		{"a named advertise address is used as given", func(o *Options) { o.AdvertiseAddress = "10.0.0.1" }, true, false},
		{"a named node IP is used as given", func(o *Options) { o.NodeIP = "10.0.0.1" }, true, false},
		{"every address (0.0.0.0) is not loopback only", func(o *Options) { o.BindAddress = "0.0.0.0" }, true, false},
		{"another loopback address", func(o *Options) { o.BindAddress = "127.0.0.2" }, true, true},
	}
	for _, tc := range tests {
		o := NewOptions()
		tc.mutate(o)
		if got := OwnsNodeAddress(*o, tc.root); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestProxyArgs(t *testing.T) {
	args := ProxyArgs(Proxy{Kubeconfig: "/d/kube-proxy.kubeconfig", NodeName: "n1", Mode: "nftables", ClusterCIDR: "10.244.0.0/24", NodeIP: "10.244.0.1", HealthzPort: 10256, MetricsPort: 10249})
	for _, want := range []string{"--kubeconfig=/d/kube-proxy.kubeconfig", "--hostname-override=n1", "--proxy-mode=nftables", "--cluster-cidr=10.244.0.0/24",
		"--healthz-bind-address=10.244.0.1:10256", "--metrics-bind-address=127.0.0.1:10249", "--conntrack-max-per-core=0"} {
		if !slices.Contains(args, want) {
			t.Errorf("kube-proxy args lack %s: %v", want, args)
		}
	}
	if args[0] != "proxy" {
		t.Errorf("the subcommand comes first: %v", args)
	}
	// A worker does not know the cluster's pod range: its own is local.
	worker := ProxyArgs(Proxy{Kubeconfig: "/w/kube-proxy.kubeconfig", NodeName: "w1", Mode: "iptables", NodeIP: "10.0.0.4", HealthzPort: 10256, MetricsPort: 10249})
	if !slices.Contains(worker, "--detect-local-mode=NodeCIDR") || slices.ContainsFunc(worker, func(a string) bool { return strings.HasPrefix(a, "--cluster-cidr") }) {
		t.Errorf("a worker's kube-proxy args: %v; want --detect-local-mode=NodeCIDR and no --cluster-cidr", worker)
	}
}

// TestProxyPod checks kube-proxy's static pod, on a server and a worker:
// privileged, on the host's network, its kubeconfig read-only.
func TestProxyPod(t *testing.T) {
	pod := proxyPod("/d/bin/steadyplane-0123", []string{"proxy", "--kubeconfig=/w/kube-proxy.kubeconfig"}, "/w/kube-proxy.kubeconfig").Pod()
	c := pod.Spec.Containers[0]
	if pod.Name != "kube-proxy" || !pod.Spec.HostNetwork || c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Fatalf("kube-proxy's pod: %+v", pod)
	}
	var kubeconfigRO, lock bool
	for _, m := range c.VolumeMounts {
		kubeconfigRO = kubeconfigRO || m.MountPath == "/w/kube-proxy.kubeconfig" && m.ReadOnly
		lock = lock || m.MountPath == "/run/xtables.lock" && !m.ReadOnly
	}
	if !kubeconfigRO || !lock {
		t.Errorf("kube-proxy's mounts: %+v; want its kubeconfig read-only and the xtables lock", c.VolumeMounts)
	}
}

func TestNodeResolvConf(t *testing.T) {
	stub := []byte("nameserver 127.0.0.53\noptions edns0 trust-ad\n")
	real := []byte("nameserver 192.0.2.53\n")
	for _, tc := range []struct {
		name, given   string
		etc           []byte
		systemdExists bool
		want          string
	}{
		{"given: as given", "/tmp/r", stub, true, "/tmp/r"},
		{"a real server in /etc/resolv.conf", "", real, true, "/etc/resolv.conf"},
		{"systemd-resolved's stub: its list of real servers", "", stub, true, "/run/systemd/resolve/resolv.conf"},
		{"a stub without systemd's list: /etc/resolv.conf all the same", "", stub, false, "/etc/resolv.conf"},
	} {
		if got := NodeResolvConf(tc.given, tc.etc, tc.systemdExists); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
