package kubeproxy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestChooseMode(t *testing.T) {
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
		mode, warning, err := ChooseMode(tc.requested, tc.kernel, tc.nft, tc.ipt)
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

func TestProxyArgs(t *testing.T) {
	args := Args(Config{Kubeconfig: "/d/kube-proxy.kubeconfig", NodeName: "n1", Mode: "nftables", ClusterCIDR: "10.244.0.0/24", NodeIP: "10.244.0.1", HealthzPort: 10256, MetricsPort: 10249})
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
	worker := Args(Config{Kubeconfig: "/w/kube-proxy.kubeconfig", NodeName: "w1", Mode: "iptables", NodeIP: "10.0.0.4", HealthzPort: 10256, MetricsPort: 10249})
	if !slices.Contains(worker, "--detect-local-mode=NodeCIDR") || slices.ContainsFunc(worker, func(a string) bool { return strings.HasPrefix(a, "--cluster-cidr") }) {
		t.Errorf("a worker's kube-proxy args: %v; want --detect-local-mode=NodeCIDR and no --cluster-cidr", worker)
	}
}

// TestProxyPod checks kube-proxy's static pod, on a server and a worker:
// privileged, on the host's network, its kubeconfig's directory read-only
// (the client certificate beside it is replaced when renewed).
func TestProxyPod(t *testing.T) {
	pod := Pod("/d/bin/steadyplane-0123", []string{"proxy", "--kubeconfig=/w/kube-proxy.kubeconfig"}, "/w/kube-proxy.kubeconfig").Pod()
	c := pod.Spec.Containers[0]
	if pod.Name != "kube-proxy" || !pod.Spec.HostNetwork || c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Fatalf("kube-proxy's pod: %+v", pod)
	}
	var kubeconfigRO, lock bool
	for _, m := range c.VolumeMounts {
		kubeconfigRO = kubeconfigRO || m.MountPath == "/w" && m.ReadOnly
		lock = lock || m.MountPath == "/run/xtables.lock" && !m.ReadOnly
	}
	if !kubeconfigRO || !lock {
		t.Errorf("kube-proxy's mounts: %+v; want its kubeconfig's directory read-only and the xtables lock", c.VolumeMounts)
	}
}

// TestWriteWorker: a worker's kube-proxy manifest is written with the
// node's own credentials and NodeCIDR as local, and removed when it is
// switched off.
func TestWriteWorker(t *testing.T) {
	dir := t.TempDir()
	have := func(string) (string, error) { return "/usr/sbin/x", nil }
	w := Worker{Enabled: true, ManifestDir: dir, Binary: "/r/bin/steadyplane-0123", Mode: ModeIPTables,
		Kubeconfig: filepath.Join(t.TempDir(), KubeconfigFile), NodeName: "w1", NodeIP: "10.0.0.4"}
	mode, warning, err := WriteWorker(w, have)
	if err != nil || mode != ModeIPTables || warning == "" {
		t.Fatalf("WriteWorker: %q, %q, %v; want iptables with its warning", mode, warning, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--detect-local-mode=NodeCIDR", "--hostname-override=w1", "--healthz-bind-address=10.0.0.4:10256", w.Kubeconfig} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the worker's manifest lacks %s:\n%s", want, b)
		}
	}
	w.Enabled = false
	if _, _, err := WriteWorker(w, have); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); !os.IsNotExist(err) {
		t.Errorf("the manifest stays with kube-proxy off: %v", err)
	}
	if _, _, err := WriteWorker(w, have); err != nil {
		t.Errorf("switching off again (nothing to remove): %v", err)
	}
}

// TestRan: a server keeps kube-proxy's kubeconfig in its credentials
// directory, a worker (and a server of an earlier release) beside the
// rest; either says kube-proxy ran there.
func TestRan(t *testing.T) {
	for _, rel := range []string{ServerKubeconfig, KubeconfigFile} {
		dir := t.TempDir()
		if Ran(dir) {
			t.Fatalf("%s: ran before anything was written", dir)
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if !Ran(dir) {
			t.Errorf("with %s: did not run", rel)
		}
	}
}
