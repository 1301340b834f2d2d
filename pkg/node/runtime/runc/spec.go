package runc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	securejoin "github.com/cyphar/filepath-securejoin"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// DefaultCapabilities are a container's capabilities unless its security
// context adds or drops some: the set containerd and CRI-O give.
var DefaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// allCapabilities are Linux's capabilities, each at its number.
var allCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// SystemDirs are the host directories a container's root filesystem is made
// of, read-only: programs, libraries and configuration, nothing else of the
// host (no /var, /home, /root, /tmp, nor the agent's data).
var SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// HostPath is a system directory as found on the host: a directory to bind
// mount, or a symbolic link (merged /usr: /bin -> usr/bin) to recreate.
type HostPath struct {
	Path    string
	Symlink string // the link's target, "" for a directory
}

// FindSystemDirs returns the SystemDirs that exist on this host.
func FindSystemDirs() []HostPath {
	var found []HostPath
	for _, d := range SystemDirs {
		st, err := os.Lstat(d)
		switch {
		case err != nil:
		case st.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				found = append(found, HostPath{Path: d, Symlink: target})
			}
		case st.IsDir():
			found = append(found, HostPath{Path: d})
		}
	}
	return found
}

// Spec returns the OCI runtime spec of cfg: a root filesystem of its
// image (mounted by the runtime at the bundle's rootfs), or of read-only bind
// mounts of the host's system directories with a private /tmp; its own
// mount and PID namespaces, the sandbox's network, IPC and UTS namespaces,
// cfg's mounts, user, capabilities and limits, and its own cgroups at
// /sys/fs/cgroup.
func Spec(cfg *runtime.ContainerConfig, system []HostPath, cgroupsPath string) *specs.Spec {
	s := &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: "rootfs", Readonly: cfg.ReadOnlyRootFilesystem},
		Process: specProcess(cfg),
		Mounts:  specMounts(cfg, system),
		Linux: &specs.Linux{
			CgroupsPath: cgroupsPath,
			Resources:   &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}},
			Namespaces:  []specs.LinuxNamespace{{Type: specs.PIDNamespace, Path: cfg.PIDNamespace}, {Type: specs.MountNamespace}},
		},
	}
	if sb := cfg.Sandbox; sb != nil {
		for _, ns := range []struct {
			t    specs.LinuxNamespaceType
			path string
		}{{specs.NetworkNamespace, sb.NetNS}, {specs.IPCNamespace, sb.IPCNS}, {specs.UTSNamespace, sb.UTSNS}} {
			if ns.path != "" {
				s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: ns.t, Path: ns.path})
			}
		}
	}
	// A private UTS namespace is the sandbox's and has its host name
	// already; without one the container shares the host's, and runc
	// refuses to set a host name there.
	s.Hostname = ""
	if !cfg.Privileged {
		s.Linux.MaskedPaths = []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
			"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"}
		s.Linux.ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	}
	if cfg.PidsLimit > 0 {
		s.Linux.Resources.Pids = &specs.LinuxPids{Limit: &cfg.PidsLimit}
	}
	if cfg.OOMScoreAdj != 0 {
		current, canLower := agentOOMScoreAdj()
		adj := clampOOMScoreAdj(cfg.OOMScoreAdj, current, canLower)
		s.Process.OOMScoreAdj = &adj
	}
	if len(cfg.Sysctls) > 0 {
		s.Linux.Sysctl = cfg.Sysctls
	}
	r := linuxResources(cfg.Resources, false)
	s.Linux.Resources.Memory, s.Linux.Resources.CPU = r.Memory, r.CPU
	return s
}

// specProcess is the run's process: its command, environment, directory,
// user and capabilities.
func specProcess(cfg *runtime.ContainerConfig) *specs.Process {
	cwd := cfg.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	user := specs.User{}
	if cfg.User != nil {
		user = specs.User{UID: cfg.User.UID, GID: cfg.User.GID, AdditionalGids: cfg.User.AdditionalGIDs}
	}
	caps := Capabilities(cfg.Privileged, cfg.CapAdd, cfg.CapDrop)
	lc := &specs.LinuxCapabilities{Bounding: caps}
	if user.UID == 0 {
		// As containerd: a non-root user starts with no effective
		// capabilities, only the bounding set.
		lc.Effective, lc.Permitted = caps, caps
	}
	env := cfg.Env
	if cfg.TTY && !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "TERM=") }) {
		// What containerd's CRI gives a terminal.
		env = append(slices.Clip(env), "TERM=xterm")
	}
	return &specs.Process{
		Args: cfg.Argv, Env: env, Cwd: cwd, User: user, Terminal: cfg.TTY,
		Capabilities:    lc,
		NoNewPrivileges: cfg.NoNewPrivileges && !cfg.Privileged,
	}
}

// specMounts are the run's mounts: the kernel's file systems, the host's
// system directories for a host root (read-only, with a /tmp of its own),
// then the run's own binds.
func specMounts(cfg *runtime.ContainerConfig, system []HostPath) []specs.Mount {
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: sysOptions(cfg.Privileged)},
		// The container's own cgroups, read-only unless privileged (as
		// containerd's): what it may use, as resizes change it.
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: cgroupOptions(cfg.Privileged)},
	}
	for _, d := range system {
		if d.Symlink == "" {
			mounts = append(mounts, specs.Mount{Destination: d.Path, Type: "bind", Source: d.Path, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
		}
	}
	if cfg.Rootfs == nil {
		// The host's directories are read-only; an image's /tmp is its own.
		mounts = append(mounts, specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}})
	}
	for _, m := range cfg.Mounts {
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
	}
	return mounts
}

// The kubelet's CPU settings (pkg/kubelet/cm, helpers_linux.go): shares
// per CPU and their bounds, and the CFS period and smallest quota.
const (
	sharesPerCPU  = 1024
	minShares     = 2
	maxShares     = 262144
	quotaPeriod   = 100000
	minQuota      = 1000
	millisPerCore = 1000
)

// cpuShares is the kubelet's MilliCPUToShares: the share of a CPU request,
// the minimum for none.
func cpuShares(millis int64) uint64 {
	shares := millis * sharesPerCPU / millisPerCore
	return uint64(min(max(shares, minShares), maxShares))
}

// linuxResources are r as runc sets them, as the kubelet asks a CRI
// runtime for them: a memory limit, a CFS quota for a CPU limit and shares
// for the CPU request. For an update (runc update), a limit that is gone
// is -1, which lifts it; at creation it is left out.
func linuxResources(r runtime.Resources, update bool) specs.LinuxResources {
	var out specs.LinuxResources
	shares := cpuShares(r.CPURequestMillis)
	out.CPU = &specs.LinuxCPU{Shares: &shares}
	switch {
	case r.CPUMillis > 0:
		period := uint64(quotaPeriod)
		quota := max(r.CPUMillis*quotaPeriod/millisPerCore, minQuota)
		out.CPU.Period, out.CPU.Quota = &period, &quota
	case update:
		unlimited := int64(-1)
		out.CPU.Quota = &unlimited
	}
	switch {
	case r.MemoryLimit > 0:
		limit := r.MemoryLimit
		out.Memory = &specs.LinuxMemory{Limit: &limit}
	case update:
		unlimited := int64(-1)
		out.Memory = &specs.LinuxMemory{Limit: &unlimited}
	}
	return out
}

func cgroupOptions(privileged bool) []string {
	if privileged {
		return []string{"nosuid", "noexec", "nodev", "relatime"}
	}
	return []string{"nosuid", "noexec", "nodev", "relatime", "ro"}
}

func sysOptions(privileged bool) []string {
	if privileged {
		return []string{"nosuid", "noexec", "nodev"}
	}
	return []string{"nosuid", "noexec", "nodev", "ro"}
}

// currentCapabilities are the capabilities the node agent's process may
// pass on (its bounding set), which is what a privileged container gets, as
// containerd's WithAllCurrentCapabilities: a machine (or a sandbox around
// it) may withhold some, and asking runc for one it lacks fails the start.
var currentCapabilities = sync.OnceValue(func() []string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return allCapabilities
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil {
				return capabilitiesIn(mask)
			}
		}
	}
	return allCapabilities
})

// capabilitiesIn returns the names of the capabilities whose bits mask has.
func capabilitiesIn(mask uint64) []string {
	var out []string
	for i, c := range allCapabilities {
		if mask&(1<<uint(i)) != 0 {
			out = append(out, c)
		}
	}
	return out
}

// Capabilities returns the capability set of a container: all the agent
// may give when privileged, else DefaultCapabilities with add added and
// drop dropped ("ALL" drops every default, and adds all the agent may give;
// names with or without "CAP_").
func Capabilities(privileged bool, add, drop []string) []string {
	if privileged {
		return append([]string(nil), currentCapabilities()...)
	}
	set := map[string]bool{}
	for _, c := range DefaultCapabilities {
		set[c] = true
	}
	for _, c := range drop {
		if strings.EqualFold(c, "ALL") {
			set = map[string]bool{}
			break
		}
	}
	for _, c := range drop {
		delete(set, capName(c))
	}
	for _, c := range add {
		if strings.EqualFold(c, "ALL") {
			for _, a := range currentCapabilities() {
				set[a] = true
			}
			continue
		}
		set[capName(c)] = true
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func capName(c string) string {
	c = strings.ToUpper(c)
	if !strings.HasPrefix(c, "CAP_") {
		c = "CAP_" + c
	}
	return c
}

// prepareRootfs makes in dir (an empty directory, or an image's root) a
// mount point for every directory mount of s, and the host's merged-/usr
// links for a root of host directories, so that runc can mount onto a
// read-only root. Every mount point is confined to dir.
func prepareRootfs(dir string, s *specs.Spec, system []HostPath) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	for _, d := range system {
		if d.Symlink != "" {
			p := filepath.Join(dir, d.Path)
			if cur, err := os.Readlink(p); err == nil && cur == d.Symlink {
				continue
			}
			_ = os.RemoveAll(p)
			if err := os.Symlink(d.Symlink, p); err != nil {
				return err
			}
		}
	}
	for _, m := range s.Mounts {
		// Inside the root whatever the path says: a destination with ".."
		// or through a symbolic link of the image resolves as runc will
		// resolve it, never to a directory of the host.
		p, err := securejoin.SecureJoin(dir, m.Destination)
		if err != nil {
			return fmt.Errorf("mount point %s: %w", m.Destination, err)
		}
		if _, err := os.Lstat(p); err == nil {
			if m.Type == "tmpfs" && !isUnderOtherMount(m.Destination, s.Mounts) {
				if err := os.Chmod(p, tmpfsMode(m.Options)); err != nil {
					return err
				}
			}
			continue
		}
		if m.Type == "bind" {
			if st, err := os.Stat(m.Source); err == nil && !st.IsDir() {
				// A file mount point: under a mounted directory (/etc/hosts)
				// runc makes it; at the root level it must exist.
				if filepath.Dir(m.Destination) == "/" {
					if f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
						f.Close()
					}
				}
				continue
			}
		}
		if sys, ok := underSystemDir(m.Destination, system); ok && m.Type == "bind" {
			// The host's system directory is bound read-only, so runc
			// cannot make the mount point in it: it has to exist on the
			// host (as kubeadm's /etc/kubernetes/... does). An empty
			// directory is all that is made; a pod that may bind host
			// paths could make it anyway.
			if _, err := os.Stat(m.Destination); errors.Is(err, fs.ErrNotExist) {
				if st, err := os.Stat(m.Source); err == nil && st.IsDir() {
					if err := os.MkdirAll(m.Destination, 0o755); err != nil {
						return fmt.Errorf("mount point %s in the host's %s: %w", m.Destination, sys, err)
					}
				}
			}
			continue
		}
		if isUnderOtherMount(m.Destination, s.Mounts) {
			continue // runc creates it inside that mount
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if m.Type == "tmpfs" {
			// runc gives a tmpfs its mount point's mode, not mode=.
			if err := os.Chmod(p, tmpfsMode(m.Options)); err != nil {
				return err
			}
		}
	}
	return nil
}

// tmpfsMode returns the mode= option of a tmpfs mount (default 01777).
func tmpfsMode(opts []string) os.FileMode {
	for _, o := range opts {
		if v, ok := strings.CutPrefix(o, "mode="); ok {
			if n, err := strconv.ParseUint(v, 8, 32); err == nil {
				mode := os.FileMode(n & 0o777)
				if n&0o1000 != 0 {
					mode |= os.ModeSticky
				}
				return mode
			}
		}
	}
	return 0o777 | os.ModeSticky
}

// isUnderOtherMount tells whether dest lies inside another mount of mounts
// (not the root filesystem), where its mount point is that mount's business.
// underSystemDir returns the host system directory (bound read-only into
// every container) that dest lies in, if any.
func underSystemDir(dest string, system []HostPath) (string, bool) {
	for _, d := range system {
		if d.Symlink == "" && strings.HasPrefix(dest, strings.TrimSuffix(d.Path, "/")+"/") {
			return d.Path, true
		}
	}
	return "", false
}

func isUnderOtherMount(dest string, mounts []specs.Mount) bool {
	for _, m := range mounts {
		if m.Destination != dest && strings.HasPrefix(dest, strings.TrimSuffix(m.Destination, "/")+"/") {
			return true
		}
	}
	return false
}

// clampOOMScoreAdj is the oom_score_adj a container can be given: want, or
// the agent's own (current) when want is lower and the agent may not lower
// it (no CAP_SYS_RESOURCE, as on machines that withhold it), as containerd
// restricts it; asking runc for less makes every start fail.
func clampOOMScoreAdj(want, current int, canLower bool) int {
	if want < current && !canLower {
		return current
	}
	return want
}

// agentOOMScoreAdj is the agent's own oom_score_adj and whether it may set
// a lower one.
var agentOOMScoreAdj = sync.OnceValues(func() (int, bool) {
	current := 0
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			current = n
		}
	}
	return current, slices.Contains(currentCapabilities(), "CAP_SYS_RESOURCE")
})
