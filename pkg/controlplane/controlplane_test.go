package controlplane

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/pkg/addons/kubeproxy"
	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantErr string
	}{
		{"defaults", func(*Options) {}, ""},
		{"bad bind", func(o *Options) { o.BindAddress = "localhost" }, "--bind-address"},
		{"bad advertise", func(o *Options) { o.AdvertiseAddress = "10.0.0" }, "--advertise-address"},
		{"port zero", func(o *Options) { o.APIServerPort = 0 }, "--apiserver-port=0"},
		{"port too big", func(o *Options) { o.EtcdPeerPort = 70000 }, "--etcd-peer-port"},
		{"same etcd ports", func(o *Options) { o.EtcdPeerPort = o.EtcdClientPort }, "must differ"},
		{"bad cidr", func(o *Options) { o.ServiceCIDR = "10.96.0.0" }, "--service-cidr"},
		{"empty data dir", func(o *Options) { o.DataDir = "" }, "--data-dir"},
		{"a pod range of its own becomes the cluster's", func(o *Options) { o.PodCIDR = "10.250.3.0/24" }, ""},
		{"a pod range outside a named cluster range", func(o *Options) { o.PodCIDR = "10.250.3.0/24"; o.ClusterCIDR = "10.245.0.0/16" }, "must lie in --cluster-cidr"},
		{"pod range across the cluster range's end", func(o *Options) {
			o.PodCIDR = "10.244.0.0/23"
			o.ClusterCIDR = "10.244.0.0/24"
			o.NodeCIDRMaskSize = 24
		}, "must lie in --cluster-cidr"},
		{"node mask wider than the cluster", func(o *Options) { o.NodeCIDRMaskSize = 8 }, "--node-cidr-mask-size=8"},
		{"a server without a token", func(o *Options) { o.Server = "https://10.0.0.1:6443" }, "--token or --token-file"},
		{"both token flags", func(o *Options) { o.Server, o.Token, o.TokenFile = "https://10.0.0.1:6443", "t", "f" }, "exclude each other"},
	}
	for _, tc := range tests {
		o := NewOptions()
		tc.mutate(o)
		// A named cluster range stays as named; complete only fills in the default.
		if o.ClusterCIDR == NewOptions().ClusterCIDR {
			o.complete()
		}
		err := o.validate()
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}

func prepared(t *testing.T, mutate func(*Options)) *ControlPlane {
	t.Helper()
	o := NewOptions()
	o.DataDir = filepath.Join(t.TempDir(), "sp")
	o.Binary = "/bin/true"
	// No bridge, no apt-get: a unit test leaves the machine as it is,
	// also as root.
	o.NodeRuntime = "process"
	mutate(o)
	cp, err := Prepare(*o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	return cp
}

func TestPrepareArguments(t *testing.T) {
	cp := prepared(t, func(o *Options) { o.ExtraAPIServerArgs = []string{"--v=4"} })
	args := cp.APIServer.Args
	for _, want := range []string{
		"--endpoint-reconciler-type=none", // loopback cannot be published in Endpoints
		"--authorization-mode=Node,RBAC",
		"--startup-send-retry-after-if-not-initialized=true",
		"--bind-address=127.0.0.1",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("apiserver args lack %s", want)
		}
	}
	if args[len(args)-1] != "--v=4" {
		t.Errorf("extra args must come last to override: %v", args)
	}
	if cp.APIServerURL() != "https://127.0.0.1:6443" {
		t.Errorf("URL %s", cp.APIServerURL())
	}
	for _, a := range cp.Etcd.Args {
		if strings.HasPrefix(a, "--listen-") && !strings.Contains(a, "https://127.0.0.1:") {
			t.Errorf("etcd must listen on loopback over TLS: %s", a)
		}
	}
	if st, err := os.Stat(cp.Kubeconfig()); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig: %v %v", err, st)
	}

	// The controllers: their own identities, leader election, the cluster's
	// signing keys, and the node's pod range as the cluster's.
	cm := strings.Join(cp.ControllerManager.Args, " ")
	for _, want := range []string{
		"--kubeconfig=" + filepath.Join(cp.DataDir(), "credentials", "controller-manager", "kubeconfig"),
		"--leader-elect=true", "--use-service-account-credentials=true",
		"--service-account-private-key-file=" + cp.PKI().ServiceAccountKey,
		"--cluster-signing-kube-apiserver-client-key-file=" + filepath.Join(cp.DataDir(), "pki", "ca.key"),
		// Node serving certificates from the kubelet CA, which the API
		// server trusts for nothing else.
		"--cluster-signing-kubelet-serving-key-file=" + filepath.Join(cp.DataDir(), "pki", "kubelet-ca.key"),
		"--allocate-node-cidrs=true --cluster-cidr=10.244.0.0/16 --node-cidr-mask-size=24",
		"--bind-address=127.0.0.1 --secure-port=10257",
	} {
		if !strings.Contains(cm, want) {
			t.Errorf("controller-manager args lack %s: %s", want, cm)
		}
	}
	sched := strings.Join(cp.Scheduler.Args, " ")
	if !strings.Contains(sched, "--kubeconfig="+filepath.Join(cp.DataDir(), "credentials", "scheduler", "kubeconfig")) || !strings.Contains(sched, "--leader-elect=true") {
		t.Errorf("scheduler args: %s", sched)
	}
	// Each component's kubeconfig names its certificate's files, which
	// the renewal replaces while it runs.
	for _, name := range []string{"controller-manager", "scheduler", "node-steadyplane"} {
		dir := filepath.Join(cp.DataDir(), "credentials", name)
		for _, f := range []string{"kubeconfig", name + ".key"} {
			if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s/%s: %v %v, want 0600", name, f, err, st)
			}
		}
		kc, err := clientcmd.LoadFromFile(filepath.Join(dir, "kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range kc.AuthInfos {
			if u.ClientCertificate != filepath.Join(dir, name+".crt") || u.ClientKey != filepath.Join(dir, name+".key") || len(u.ClientCertificateData) > 0 {
				t.Errorf("%s's kubeconfig: certificate %q, key %q, %d bytes held; want the files in %s named", name, u.ClientCertificate, u.ClientKey, len(u.ClientCertificateData), dir)
			}
		}
	}
	if slices.ContainsFunc(cp.APIServer.Args, func(a string) bool { return strings.HasPrefix(a, "--disable-admission-plugins") }) {
		t.Errorf("no admission plugin may be off: %v", cp.APIServer.Args)
	}

	routable := prepared(t, func(o *Options) { o.AdvertiseAddress = "192.0.2.10" })
	if slices.Contains(routable.APIServer.Args, "--endpoint-reconciler-type=none") {
		t.Error("a routable advertise address should be published by the lease reconciler")
	}
}

func TestPrepareLocksTheDataDirectory(t *testing.T) {
	cp := prepared(t, func(*Options) {})
	o := NewOptions()
	o.DataDir = cp.DataDir()
	o.Binary = "/bin/true"
	// As prepared's: as root, the default runtime would put up's address
	// on a pod bridge of the machine's and leave it there.
	o.NodeRuntime = "process"
	if _, err := Prepare(*o); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Prepare: %v", err)
	}
	cp.Close()
	again, err := Prepare(*o)
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	again.Close()
}

func TestProcessStopAndLogTail(t *testing.T) {
	dir := t.TempDir()
	p := &Process{Name: "sleeper", Binary: "/bin/sh", Args: []string{"-c", "echo one; echo two; exec sleep 30"}, LogPath: filepath.Join(dir, "logs", "p.log")}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasSuffix(p.LogTail(1), "two") {
		if time.Now().After(deadline) {
			t.Fatalf("log tail %q", p.LogTail(5))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !p.Stop(5 * time.Second) {
		t.Error("sleep did not stop on SIGTERM")
	}
	if p.Err() == nil {
		t.Error("a process stopped by a signal should report it")
	}
	if got := p.LogTail(2); got != "one\ntwo" {
		t.Errorf("LogTail(2) = %q", got)
	}
	if st, _ := os.Stat(p.LogPath); st.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v", st.Mode().Perm())
	}
}

func TestProcessKilledAfterGrace(t *testing.T) {
	p := &Process{Name: "stubborn", Binary: "/bin/sh", Args: []string{"-c", "trap '' TERM; echo trapped-$((40+2)); while :; do sleep 0.05; done"}, LogPath: filepath.Join(t.TempDir(), "p.log")}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	// The log's header line repeats the arguments; only the shell prints "trapped-42".
	for !strings.Contains(p.LogTail(1), "trapped-42") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p.Stop(300 * time.Millisecond) {
		t.Error("a process ignoring SIGTERM reported a clean stop")
	}
	select {
	case <-p.Exited():
	default:
		t.Error("process still running after Stop")
	}
}

func TestPrepareMakesTheDataDirectoryPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sp")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prepared(t, func(o *Options) { o.DataDir = dir })
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("data directory made by hand as 0755: %v %v, want 0700 after prepare", err, st.Mode().Perm())
	}
}

// TestComponentManifests checks that each component's static pod is one the
// node agent accepts (upstream's pod validation, through the same parser),
// runs the installed binary with the process's arguments, and mounts what
// it uses.
func TestComponentManifests(t *testing.T) {
	staticpod.AllowPrivileged() // as the node agent does
	cp := prepared(t, func(*Options) {})
	src := filepath.Join(t.TempDir(), "steadyplane")
	if err := os.WriteFile(src, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	bin, err := binary.Install(src, filepath.Join(cp.DataDir(), "bin"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := binary.Install(src, filepath.Join(cp.DataDir(), "bin"))
	if err != nil || again != bin {
		t.Fatalf("installing the same binary again: %s, %v; want %s", again, err, bin)
	}
	if st, err := os.Stat(bin); err != nil || st.Mode().Perm() != binary.Mode {
		t.Fatalf("installed binary: %v %v", err, st)
	}
	manifests := t.TempDir()
	// kube-proxy runs only with runc as root, which a unit test has not:
	// its process as prepareProxy makes it there.
	cp.Proxy = &Process{Name: proxyComponent, Args: kubeproxy.Args(kubeproxy.Config{Kubeconfig: filepath.Join(cp.DataDir(), "kube-proxy.kubeconfig"), NodeName: "n1",
		Mode: kubeproxy.ModeNFTables, ClusterCIDR: "10.244.0.0/24", NodeIP: "10.244.0.1", HealthzPort: 10256, MetricsPort: 10249})}
	components := cp.podSpecs(bin)
	if len(components) != 6 {
		t.Fatalf("%d components, want etcd, API server, controller manager, scheduler, kube-proxy, readiness controller", len(components))
	}
	for _, c := range components {
		if err := staticpod.Write(manifests, c.Pod()); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(manifests, c.Name+".yaml")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, st.Mode().Perm())
		}
		pod, err := staticpod.Parse(data, "n1")
		if err != nil {
			t.Fatalf("%s: the node agent refuses it: %v", c.Name, err)
		}
		ctr := pod.Spec.Containers[0]
		if !pod.Spec.HostNetwork || pod.Namespace != "kube-system" || ctr.Command[0] != bin || !slices.Equal(ctr.Command[1:], c.Args) {
			t.Errorf("%s: hostNetwork %v, namespace %s, command %v", c.Name, pod.Spec.HostNetwork, pod.Namespace, ctr.Command)
		}
		mounted := map[string]bool{}
		for _, m := range ctr.VolumeMounts {
			mounted[m.MountPath] = true
		}
		if privileged := ctr.SecurityContext != nil && ctr.SecurityContext.Privileged != nil && *ctr.SecurityContext.Privileged; privileged != (c.Name == "kube-proxy") {
			t.Errorf("%s: privileged %v; only kube-proxy is", c.Name, privileged)
		}
		if c.Name == "kube-proxy" && !mounted["/run/xtables.lock"] {
			t.Errorf("kube-proxy does not share the host's xtables lock: %v", ctr.VolumeMounts)
		}
		// The PKI (the CAs' keys) only where it is read: the signers, etcd,
		// the API server; every client its own credentials alone.
		pkiDir := filepath.Join(cp.DataDir(), "pki")
		needsPKI := map[string]bool{"kube-controller-manager": true, "etcd": true, "kube-apiserver": true}
		if mounted[pkiDir] != needsPKI[c.Name] {
			t.Errorf("%s mounts %s: %v, want %v: %v", c.Name, pkiDir, mounted[pkiDir], needsPKI[c.Name], ctr.VolumeMounts)
		}
		if c.Name != "kube-proxy" && !mounted[filepath.Dir(bin)] {
			t.Errorf("%s does not mount %s: %v", c.Name, filepath.Dir(bin), ctr.VolumeMounts)
		}
	}
}

func TestValidateProxy(t *testing.T) {
	o := NewOptions()
	o.Node = false
	if err := o.validate(); err != nil {
		t.Errorf("no node agent (so no kube-proxy, no DNS): %v", err)
	}
	o = NewOptions()
	o.ProxyHealthzPort = 0
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--proxy-healthz-port=0") {
		t.Errorf("kube-proxy health port 0: %v", err)
	}
}

// TestAPIServerLivenessOnBindAddress: a server on a host address does not
// listen on loopback, so its probe goes to that address (a probe of
// 127.0.0.1 failed for 80s and restarted every server of a cluster).
func TestAPIServerLivenessOnBindAddress(t *testing.T) {
	for bind, want := range map[string]string{"127.0.0.1": "127.0.0.1", "10.0.0.2": "10.0.0.2", "0.0.0.0": "127.0.0.1"} {
		cp := prepared(t, func(o *Options) { o.BindAddress = bind })
		for _, c := range cp.podSpecs("/bin/true") {
			if c.Name != "kube-apiserver" {
				continue
			}
			if got := c.Pod().Spec.Containers[0].LivenessProbe.HTTPGet.Host; got != want {
				t.Errorf("--bind-address=%s: probe of %s, want %s", bind, got, want)
			}
		}
	}
}
