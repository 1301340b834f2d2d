// Package runtime is the node agent's container runtime interface: a pod is a
// sandbox (the namespaces its containers share) and containers started in
// it, one run at a time. Two implementations: runc (package runc), which
// isolates each container, and process (package process), which runs host
// processes where runc or root is missing.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// HostRuntimeClass is the RuntimeClass whose pods' containers get, instead
// of their image, a root filesystem of the host's system directories,
// read-only: steadyplane's own control-plane static pods, and tools that run
// host programs. `up` creates it; the node agent goes by the name and does
// not read the object.
const HostRuntimeClass = "steadyplane-host"

// HostRuntimeHandler is the handler HostRuntimeClass names.
const HostRuntimeHandler = "host"

// Sandbox is what a pod's containers share: network, IPC and UTS
// namespaces, each pinned at a path ("" for the host's).
type Sandbox struct {
	// ID names the sandbox (the pod's UID).
	ID string
	// Dir holds the sandbox's files (pinned namespaces, hosts file).
	Dir string
	// NetNS, IPCNS and UTSNS are paths of namespace files; "" shares the host's.
	NetNS, IPCNS, UTSNS string
}

// Mount is a bind mount into a container.
type Mount struct {
	Source, Destination string
	ReadOnly            bool
}

// Rootfs is a root filesystem from an image: the image's unpacked layers
// stacked by overlayfs under a writable layer of the container's own, made
// fresh for each run.
type Rootfs struct {
	// Layers are the directories of the image's layers, top first.
	Layers []string
}

// Seccomp is a container's seccomp profile.
type Seccomp struct {
	// RuntimeDefault is the runtime's default profile (containerd's and
	// Docker's: an allowlist that grows with the container's capabilities).
	RuntimeDefault bool
	// LocalhostProfile is the path of a profile on the node, in Docker's
	// JSON format, as Kubernetes' Localhost profiles are; used unless
	// RuntimeDefault.
	LocalhostProfile string
}

// User is the identity a container's process runs as.
type User struct {
	UID, GID       uint32
	AdditionalGIDs []uint32
}

// ContainerConfig is one container as the runtime runs it.
type ContainerConfig struct {
	// ID names the container for the runtime; one run at a time has it.
	ID string
	// Dir is the container's own directory (bundle, exit and pid files).
	Dir string
	// Run numbers the run (0 first); an exit file names the run it ends.
	Run int32
	// Sandbox is the pod's; nil for none (process runtime).
	Sandbox *Sandbox
	// PIDNamespace is a PID namespace to join (a path such as
	// /proc/<pid>/ns/pid: an ephemeral container's target's); "" for one of
	// its own.
	PIDNamespace string
	// Hostname is the container's host name (the pod's name).
	Hostname   string
	Argv       []string
	Env        []string
	WorkingDir string
	// LogPath receives stdout and stderr in the CRI log format.
	LogPath string
	// Stdin keeps a stdin stream open for attach; StdinOnce closes it when
	// the first attach ends; TTY gives the process a terminal (the
	// container's stdin, stdinOnce and tty).
	Stdin, StdinOnce, TTY bool
	Mounts                []Mount
	// Rootfs is the container's root filesystem from its image; nil for
	// one made of the host's system directories, read-only (pods of the
	// steadyplane-host runtime class, and every container of the process
	// runtime, which has no root of its own).
	Rootfs *Rootfs
	// Seccomp is the container's seccomp profile; nil for none (unconfined).
	Seccomp *Seccomp
	// Sysctls are set in the container's namespaces (namespaced sysctls
	// only; the agent admits them).
	Sysctls map[string]string
	// User is nil for the runtime's default (root).
	User                   *User
	ReadOnlyRootFilesystem bool
	Privileged             bool
	NoNewPrivileges        bool
	// CapAdd and CapDrop change the default capability set (names with
	// or without the CAP_ prefix; "ALL" in CapDrop drops every one).
	CapAdd, CapDrop []string
	// Resources are the container's memory and CPU limits and its CPU
	// request (in-place resize changes them on a Resizable run).
	Resources
	// PidsLimit caps the container's processes and threads; 0 for none.
	PidsLimit int64
	// OOMScoreAdj is the container's oom_score_adj (-1000..1000), by its
	// pod's QoS as the kubelet sets it: -997 for node-critical and
	// Guaranteed pods, 1000 for BestEffort.
	OOMScoreAdj int
	// DieWithAgent ends the container when the agent dies (process runtime
	// only: runc containers outlive an agent crash and are adopted).
	DieWithAgent bool
}

// Exit is how a container run ended.
type Exit struct {
	// Run is the run that ended.
	Run      int32
	ExitCode int32
	// Signal is the signal that ended it, if one did.
	Signal    string
	OOMKilled bool
	// Message says why it ended, when the runtime knows more than the code
	// (a run that could not start, an exit that was not seen).
	Message    string
	StartedAt  time.Time
	FinishedAt time.Time
}

// Container is one run of a container.
type Container interface {
	// ID is the runtime's id of the run, as ContainerStatus.ContainerID shows it.
	ID() string
	StartedAt() time.Time
	// Done is closed when the run has ended; Exit is valid then.
	Done() <-chan struct{}
	Exit() Exit
	// Stop sends SIGTERM, and SIGKILL after grace; it returns once the run ended.
	Stop(grace time.Duration)
	// Command returns a command that runs argv inside the container (exec
	// probes, kubectl exec), with env and dir as given. With tty the
	// command's stdin must be a terminal, which it relays to a terminal in
	// the container (resize it to resize both).
	Command(argv, env []string, dir string, tty bool) *exec.Cmd
}

// Usage is what a run uses of the node now.
type Usage struct {
	// MemoryWorkingSet is its memory less what the kernel can drop at once
	// (inactive file pages), as the kubelet's working set: bytes.
	MemoryWorkingSet int64
	// Processes counts its processes and threads.
	Processes int64
	// CPUUsageNanoseconds is the CPU time it has used since it started,
	// all cores summed.
	CPUUsageNanoseconds uint64
}

// Measured is a run whose use of the node can be read.
type Measured interface {
	// Usage returns the run's usage now; false when it cannot be read.
	Usage() (Usage, bool)
}

// PIDNamespaced is a run whose PID namespace others can join.
type PIDNamespaced interface {
	// PIDNamespace is the path of the run's PID namespace.
	PIDNamespace() string
}

// Resources are the cgroup settings of a container that follow its
// resources in the pod spec.
type Resources struct {
	// MemoryLimit in bytes and CPUMillis (the limit) in thousandths of a
	// CPU; 0 for none.
	MemoryLimit int64
	CPUMillis   int64
	// CPURequestMillis is the CPU request, which sets the container's
	// share of CPU time under contention (cpu.shares, or cpu.weight on
	// cgroup v2); 0 for none, the kubelet's minimum share.
	CPURequestMillis int64
}

// Resizable is a run whose resources change while it runs (in-place pod
// resize), as the CRI's UpdateContainerResources.
type Resizable interface {
	// Resize applies r to the running container; it fails (and changes
	// nothing the kernel refuses) when, say, a memory limit is below what
	// the container uses.
	Resize(ctx context.Context, r Resources) error
}

// Attachable is a run whose stdin and output can be attached to (kubectl
// attach -i, kubectl run -it), as the CRI's Attach.
type Attachable interface {
	// Attach copies stdin (nil for none) to the run's stdin and its output
	// to stdout and stderr (one stream under a terminal) until the run or
	// ctx ends; resize, for a terminal, resizes it. It refuses stdin when
	// the run has no stdin stream.
	Attach(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, resize <-chan remotecommand.TerminalSize) error
}

// Runtime starts containers.
type Runtime interface {
	// Name is "runc" or "process", as Node status and events show it.
	Name() string
	// Isolated tells whether containers are isolated from the host (own
	// filesystem, users, network); false for host processes.
	Isolated() bool
	// CreateSandbox returns pod id's sandbox in dir, creating what does not
	// exist yet; an existing sandbox (a restarted agent) is kept.
	CreateSandbox(id, dir, hostname string, hostNetwork bool) (*Sandbox, error)
	// RemoveSandbox releases what CreateSandbox made.
	RemoveSandbox(s *Sandbox) error
	// Start starts a run of the container.
	Start(ctx context.Context, cfg *ContainerConfig) (Container, error)
	// Adopt returns the run of cfg's container that a previous agent left,
	// running or ended while no agent watched, or false if there is none.
	// A run adopted that way is not started again.
	Adopt(cfg *ContainerConfig) (Container, bool)
}

// Choose decides what --runtime=mode means on this machine, given why runc
// cannot be used (nil when it can): the runtime's name, and a warning when
// it is host processes. auto is runc, and an error where runc cannot be
// used: host processes are only for who asks for them.
func Choose(mode string, runcUnavailable error) (name, warning string, err error) {
	switch mode {
	case "runc":
		if runcUnavailable != nil {
			return "", "", fmt.Errorf("--runtime=runc: %w", runcUnavailable)
		}
		return "runc", "", nil
	case "process":
		return "process", "pods run as host processes, NOT isolated (--runtime=process): they share the host's network and files and the agent's user", nil
	case "auto", "":
		// Never a quietly lesser node: host processes only when asked for.
		if runcUnavailable != nil {
			return "", "", fmt.Errorf("isolated pods need runc, and %v: install it (Debian: apt-get install runc containernetworking-plugins iptables) and run as root, or pass --runtime=process to run pods as host processes, NOT isolated", runcUnavailable)
		}
		return "runc", "", nil
	}
	return "", "", fmt.Errorf("--runtime=%q: want auto, runc or process", mode)
}

// StopWithGrace ends a run: term, then kill once grace has passed without
// done closing; it returns when done is closed.
func StopWithGrace(done <-chan struct{}, grace time.Duration, term, kill func()) {
	select {
	case <-done:
		return
	default:
	}
	term()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	kill()
	<-done
}

// Ending is the end of a run, shared by the runtimes' containers: Done is
// closed once Finish has recorded the Exit.
type Ending struct {
	done chan struct{}
	once sync.Once
	mu   sync.Mutex
	exit Exit
}

// NewEnding returns an ending not reached yet.
func NewEnding() *Ending { return &Ending{done: make(chan struct{})} }

// Finish records exit and closes Done; later calls do nothing.
func (e *Ending) Finish(exit Exit) {
	e.once.Do(func() {
		e.mu.Lock()
		e.exit = exit
		e.mu.Unlock()
		close(e.done)
	})
}

// Done is closed when the run has ended.
func (e *Ending) Done() <-chan struct{} { return e.done }

// Exit is how the run ended, once Done is closed.
func (e *Ending) Exit() Exit {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.exit
}

// UnmountUnder takes down every mount at or under dir, deepest first: what
// the runtime mounted for a pod's containers, before the pod's directory is
// removed (a mount left there makes the removal fail, or worse, reach into
// the image's layers).
func UnmountUnder(dir string) error {
	dir = filepath.Clean(dir)
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m.Mountpoint, err))
		}
	}
	return errors.Join(errs...)
}
