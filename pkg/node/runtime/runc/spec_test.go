package runc

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

func TestCapabilities(t *testing.T) {
	cases := []struct {
		name       string
		privileged bool
		add, drop  []string
		has, lacks []string
		count      int
	}{
		{name: "default", has: []string{"CAP_CHOWN", "CAP_NET_BIND_SERVICE"}, lacks: []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN"}, count: len(DefaultCapabilities)},
		{name: "add without prefix", add: []string{"net_admin"}, has: []string{"CAP_NET_ADMIN", "CAP_CHOWN"}, count: len(DefaultCapabilities) + 1},
		{name: "drop one", drop: []string{"CAP_NET_RAW"}, lacks: []string{"CAP_NET_RAW"}, count: len(DefaultCapabilities) - 1},
		{name: "drop all, add one", drop: []string{"ALL"}, add: []string{"NET_BIND_SERVICE"}, has: []string{"CAP_NET_BIND_SERVICE"}, count: 1},
		{name: "drop all", drop: []string{"all"}, count: 0},
		{name: "privileged", privileged: true, drop: []string{"ALL"}, has: []string{"CAP_SYS_ADMIN"}, count: len(currentCapabilities())},
		{name: "add ALL", add: []string{"ALL"}, count: len(currentCapabilities())},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Capabilities(tc.privileged, tc.add, tc.drop)
			if len(got) != tc.count {
				t.Errorf("%d capabilities %v, want %d", len(got), got, tc.count)
			}
			for _, c := range tc.has {
				if !slices.Contains(got, c) {
					t.Errorf("lacks %s: %v", c, got)
				}
			}
			for _, c := range tc.lacks {
				if slices.Contains(got, c) {
					t.Errorf("has %s: %v", c, got)
				}
			}
		})
	}
}

func mountAt(s *specs.Spec, dest string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dest {
			return &s.Mounts[i]
		}
	}
	return nil
}

func nsPath(s *specs.Spec, t specs.LinuxNamespaceType) (string, bool) {
	for _, n := range s.Linux.Namespaces {
		if n.Type == t {
			return n.Path, true
		}
	}
	return "", false
}

func TestSpec(t *testing.T) {
	system := []HostPath{{Path: "/usr"}, {Path: "/bin", Symlink: "usr/bin"}, {Path: "/etc"}}
	sb := &runtime.Sandbox{NetNS: "/p/ns/net", IPCNS: "/p/ns/ipc", UTSNS: "/p/ns/uts"}
	base := runtime.ContainerConfig{Argv: []string{"sleep", "1"}, Hostname: "web-0", Sandbox: sb}

	s := Spec(&base, system, "/steadyplane/x")
	if m := mountAt(s, "/usr"); m == nil || !slices.Contains(m.Options, "ro") {
		t.Errorf("/usr is not a read-only bind: %+v", m)
	}
	if mountAt(s, "/bin") != nil {
		t.Error("a merged-/usr symlink became a mount")
	}
	if mountAt(s, "/tmp") == nil || mountAt(s, "/tmp").Type != "tmpfs" {
		t.Error("no private /tmp")
	}
	// The container's own cgroups, read-only: what it may use, as a
	// resize changes it (runc mounts its cgroup's directories, v1 or v2).
	if m := mountAt(s, "/sys/fs/cgroup"); m == nil || m.Type != "cgroup" || !slices.Contains(m.Options, "ro") {
		t.Errorf("cgroup mount %+v, want the container's cgroups read-only", m)
	}
	for typ, want := range map[specs.LinuxNamespaceType]string{specs.NetworkNamespace: "/p/ns/net", specs.IPCNamespace: "/p/ns/ipc", specs.UTSNamespace: "/p/ns/uts", specs.PIDNamespace: "", specs.MountNamespace: ""} {
		if got, ok := nsPath(s, typ); !ok || got != want {
			t.Errorf("namespace %s: %q %v, want %q", typ, got, ok, want)
		}
	}
	if s.Hostname != "" {
		t.Error("hostname set with a shared UTS namespace (runc refuses)")
	}
	if s.Process.User.UID != 0 || len(s.Process.Capabilities.Effective) == 0 || s.Root.Readonly || s.Linux.Resources.Memory != nil || len(s.Linux.MaskedPaths) == 0 {
		t.Errorf("defaults: user %+v caps %v readonly %v memory %v masked %v", s.Process.User, s.Process.Capabilities, s.Root.Readonly, s.Linux.Resources.Memory, s.Linux.MaskedPaths)
	}

	hardened := base
	hardened.Sandbox = &runtime.Sandbox{IPCNS: "/p/ns/ipc"} // hostNetwork
	hardened.User = &runtime.User{UID: 1000, GID: 2000}
	hardened.ReadOnlyRootFilesystem, hardened.NoNewPrivileges = true, true
	hardened.Resources = runtime.Resources{MemoryLimit: 50 << 20, CPUMillis: 250}
	hardened.Mounts = []runtime.Mount{{Source: "/data/v", Destination: "/v", ReadOnly: true}}
	s = Spec(&hardened, system, "/steadyplane/y")
	if _, ok := nsPath(s, specs.NetworkNamespace); ok {
		t.Error("hostNetwork pod got a network namespace")
	}
	if s.Hostname != "" {
		t.Errorf("hostname %q set in the host's UTS namespace (runc refuses)", s.Hostname)
	}
	if s.Process.User.UID != 1000 || s.Process.User.GID != 2000 || len(s.Process.Capabilities.Effective) != 0 || len(s.Process.Capabilities.Bounding) == 0 {
		t.Errorf("non-root user: %+v caps %+v", s.Process.User, s.Process.Capabilities)
	}
	if !s.Root.Readonly || !s.Process.NoNewPrivileges {
		t.Error("readOnlyRootFilesystem or allowPrivilegeEscalation=false lost")
	}
	if *s.Linux.Resources.Memory.Limit != 50<<20 || *s.Linux.Resources.CPU.Quota != 25000 || *s.Linux.Resources.CPU.Period != 100000 {
		t.Errorf("limits: memory %v cpu %v/%v", *s.Linux.Resources.Memory.Limit, *s.Linux.Resources.CPU.Quota, *s.Linux.Resources.CPU.Period)
	}
	if m := mountAt(s, "/v"); m == nil || m.Source != "/data/v" || !slices.Contains(m.Options, "ro") {
		t.Errorf("volume mount %+v", m)
	}

	priv := base
	priv.Privileged = true
	s = Spec(&priv, system, "")
	if len(s.Linux.MaskedPaths) != 0 || slices.Contains(mountAt(s, "/sys").Options, "ro") || slices.Contains(mountAt(s, "/sys/fs/cgroup").Options, "ro") || len(s.Process.Capabilities.Bounding) != len(currentCapabilities()) {
		t.Error("privileged container still masked, read-only /sys or cgroups, or short of capabilities")
	}
}

func TestTmpfsMode(t *testing.T) {
	for opts, want := range map[string]os.FileMode{"mode=1777": 0o777 | os.ModeSticky, "mode=755": 0o755, "": 0o777 | os.ModeSticky, "mode=zz": 0o777 | os.ModeSticky} {
		if got := tmpfsMode(strings.Split(opts, ",")); got != want {
			t.Errorf("%q: %v, want %v", opts, got, want)
		}
	}
}

func TestOOMKills(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		content string
		n       int
		ok      bool
	}{
		"v2":      {"low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n", 1, true},
		"v1":      {"oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", 0, true},
		"old v1":  {"oom_kill_disable 0\nunder_oom 0\n", 0, false},
		"garbage": {"oom_kill x\n", 0, false},
	} {
		p := dir + "/" + strings.ReplaceAll(name, " ", "_")
		_ = os.WriteFile(p, []byte(c.content), 0o600)
		if n, ok := OOMKills(p); n != c.n || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", name, n, ok, c.n, c.ok)
		}
	}
}

// A bind mount into a read-only system directory gets its mount point made
// on the host (runc cannot make it there); elsewhere the root filesystem
// gets it, and nothing outside a system directory is touched on the host.
func TestPrepareRootfsMountPointInSystemDir(t *testing.T) {
	host := t.TempDir()
	sys := filepath.Join(host, "etc")
	src := filepath.Join(host, "src")
	for _, d := range []string{sys, src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	system := []HostPath{{Path: sys}}
	inSys := filepath.Join(sys, "kubernetes", "static-pod-resources")
	outside := "/steadyplane-test-nonexistent/mnt"
	cfg := runtime.ContainerConfig{Argv: []string{"true"}, Mounts: []runtime.Mount{
		{Source: src, Destination: inSys, ReadOnly: true}, {Source: src, Destination: outside},
	}}
	rootfs := filepath.Join(host, "bundle", "rootfs")
	if err := prepareRootfs(rootfs, Spec(&cfg, system, ""), system); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(inSys); err != nil || !st.IsDir() {
		t.Errorf("mount point %s not made on the host: %v", inSys, err)
	}
	if _, err := os.Stat(outside); err == nil {
		t.Errorf("%s made on the host, outside a system directory", outside)
	}
	if st, err := os.Stat(filepath.Join(rootfs, outside)); err != nil || !st.IsDir() {
		t.Errorf("mount point %s not made in the root filesystem: %v", outside, err)
	}
}

func TestCapabilitiesIn(t *testing.T) {
	// A sandbox that withholds CAP_SYS_RESOURCE (24), as seen on these machines.
	got := capabilitiesIn(0x1fffeffffff)
	if len(got) != len(allCapabilities)-1 || slices.Contains(got, "CAP_SYS_RESOURCE") || !slices.Contains(got, "CAP_SYS_ADMIN") || got[40-1] != "CAP_CHECKPOINT_RESTORE" {
		t.Errorf("capabilitiesIn = %v", got)
	}
	if allCapabilities[21] != "CAP_SYS_ADMIN" || allCapabilities[40] != "CAP_CHECKPOINT_RESTORE" {
		t.Error("allCapabilities is not in the kernel's numbering")
	}
}

func TestSpecLimitsAndOOMScore(t *testing.T) {
	s := Spec(&runtime.ContainerConfig{Argv: []string{"x"}, PidsLimit: 4096, OOMScoreAdj: -997}, nil, "/cg")
	if s.Linux.Resources.Pids == nil || *s.Linux.Resources.Pids.Limit != 4096 {
		t.Errorf("pids limit %+v, want 4096", s.Linux.Resources.Pids)
	}
	current, canLower := agentOOMScoreAdj()
	if want := clampOOMScoreAdj(-997, current, canLower); s.Process.OOMScoreAdj == nil || *s.Process.OOMScoreAdj != want {
		t.Errorf("oom_score_adj %v, want %d", s.Process.OOMScoreAdj, want)
	}
	if s = Spec(&runtime.ContainerConfig{Argv: []string{"x"}}, nil, "/cg"); s.Linux.Resources.Pids != nil || s.Process.OOMScoreAdj != nil {
		t.Error("no limit asked, yet one set")
	}
}

// TestPrepareRootfsConfinesMountPoints: a mount destination through a
// symbolic link of the image, or with "..", makes its mount point inside
// the root, never on the host.
func TestPrepareRootfsConfinesMountPoints(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	// An image whose /data is a link to the host's /etc, as a hostile image would ship.
	if err := os.Symlink(filepath.Join(base, "host-etc"), filepath.Join(root, "data")); err != nil {
		t.Fatal(err)
	}
	s := &specs.Spec{Mounts: []specs.Mount{
		{Destination: "/data/volume", Type: "bind", Source: base},
		{Destination: "/../../escaped", Type: "bind", Source: base},
	}}
	if err := prepareRootfs(root, s, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "host-etc")); !os.IsNotExist(err) {
		t.Errorf("a mount point was made through the image's link, outside the root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "..", "escaped")); !os.IsNotExist(err) {
		t.Errorf("a mount point with .. was made outside the root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "escaped")); err != nil {
		t.Errorf("the .. mount point is not inside the root: %v", err)
	}
}

func TestClampOOMScoreAdj(t *testing.T) {
	tests := []struct {
		want, current int
		canLower      bool
		got           int
	}{
		{-997, 0, true, -997},
		{-997, 0, false, 0}, // CAP_SYS_RESOURCE withheld: as low as the agent's own
		{-997, -500, false, -500},
		{1000, 0, false, 1000}, // raising needs no capability
		{500, 0, true, 500},
	}
	for _, tc := range tests {
		if got := clampOOMScoreAdj(tc.want, tc.current, tc.canLower); got != tc.got {
			t.Errorf("clampOOMScoreAdj(%d, %d, %v) = %d, want %d", tc.want, tc.current, tc.canLower, got, tc.got)
		}
	}
}

func TestLinuxResources(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		r                     runtime.Resources
		update                bool
		shares                uint64
		quota, period, memory int64 // 0: left out
	}{
		{name: "best effort: the smallest share", shares: 2},
		{name: "request only", r: runtime.Resources{CPURequestMillis: 250}, shares: 256},
		{name: "tiny request rounds to the minimum", r: runtime.Resources{CPURequestMillis: 1}, shares: 2},
		{name: "huge request capped", r: runtime.Resources{CPURequestMillis: 1 << 30}, shares: 262144},
		{name: "limits", r: runtime.Resources{CPURequestMillis: 20, CPUMillis: 30, MemoryLimit: 45 << 20}, shares: 20, quota: 3000, period: 100000, memory: 45 << 20},
		{name: "a limit under the kernel's smallest quota", r: runtime.Resources{CPUMillis: 5}, shares: 2, quota: 1000, period: 100000},
		{name: "update lifts limits that are gone", r: runtime.Resources{CPURequestMillis: 100}, update: true, shares: 102, quota: -1, memory: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := linuxResources(tc.r, tc.update)
			if got.CPU == nil || got.CPU.Shares == nil || *got.CPU.Shares != tc.shares {
				t.Errorf("shares %v, want %d", got.CPU, tc.shares)
			}
			if q := got.CPU.Quota; (q == nil) != (tc.quota == 0) || (q != nil && *q != tc.quota) {
				t.Errorf("quota %v, want %d", q, tc.quota)
			}
			if p := got.CPU.Period; (p == nil) != (tc.period == 0) || (p != nil && int64(*p) != tc.period) {
				t.Errorf("period %v, want %d", p, tc.period)
			}
			if m := got.Memory; (m == nil) != (tc.memory == 0) || (m != nil && *m.Limit != tc.memory) {
				t.Errorf("memory %v, want %d", m, tc.memory)
			}
		})
	}
}
