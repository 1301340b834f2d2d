// Package runc is the node agent's isolating runtime: each container runs
// under runc from an OCI bundle the agent writes, watched by conmon (see
// monitor.go), which outlives the agent, so that a restarted agent adopts
// running containers instead of restarting them. A pod's
// containers share network, IPC and UTS namespaces pinned under the pod's
// directory; each has its own mount and PID namespace.
package runc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
)

// Options configure the runc runtime.
type Options struct {
	// Binary is runc's path; "" looks it up in PATH.
	Binary string
	// Root is runc's state directory (--root), the agent's own.
	Root string
	// Monitor is conmon's path; "" looks it up in PATH.
	Monitor string
	// ExitHook is the command conmon runs when a container has ended: the
	// agent's own binary and the container-exited subcommand.
	ExitHook []string
	// CgroupParent is the cgroup under which containers get theirs.
	CgroupParent string
	// LogMaxSize and LogMaxFiles rotate each run's log (0: the kubelet's
	// defaults, 10 MiB and 5 files).
	LogMaxSize  int64
	LogMaxFiles int
	// LogCheckEvery is how often every running container's log size is
	// checked for rotation besides the checks on writes (0: every 10s, the
	// kubelet's period).
	LogCheckEvery time.Duration
}

// Runtime runs containers under runc.
type Runtime struct {
	opts   Options
	system []HostPath
	logs   *logRotator
}

var _ runtime.Runtime = (*Runtime)(nil)

// Available tells whether runc can be used here: root, a runc binary and
// conmon to watch its containers. It returns runc's path.
func Available() (string, error) {
	if os.Geteuid() != 0 {
		return "", errors.New("the node agent does not run as root")
	}
	p, err := exec.LookPath("runc")
	if err != nil {
		return "", errors.New("runc is not installed (Debian package runc)")
	}
	if _, err := exec.LookPath("conmon"); err != nil {
		return "", errors.New("conmon, the monitor of runc's containers, is not installed (Debian package conmon)")
	}
	return p, nil
}

// Choose decides what --runtime=mode means on this machine (runtime.Choose
// with runc's availability here).
func Choose(mode string) (name, warning string, err error) {
	_, unavailable := Available()
	return runtime.Choose(mode, unavailable)
}

// New returns a runc runtime.
func New(o Options) (*Runtime, error) {
	if o.Binary == "" {
		p, err := Available()
		if err != nil {
			return nil, err
		}
		o.Binary = p
	}
	if o.Monitor == "" {
		p, err := exec.LookPath("conmon")
		if err != nil {
			return nil, errors.New("conmon, the monitor of runc's containers, is not installed (Debian package conmon)")
		}
		o.Monitor = p
	}
	if len(o.ExitHook) == 0 {
		return nil, errors.New("no exit hook command")
	}
	if o.CgroupParent == "" {
		o.CgroupParent = "/steadyplane"
	}
	if o.LogMaxSize <= 0 {
		o.LogMaxSize = crilog.DefaultMaxSize
	}
	if o.LogMaxFiles <= 0 {
		o.LogMaxFiles = crilog.DefaultMaxFiles
	}
	if o.LogCheckEvery <= 0 {
		o.LogCheckEvery = 10 * time.Second
	}
	if err := os.MkdirAll(o.Root, 0o700); err != nil {
		return nil, err
	}
	return &Runtime{opts: o, system: FindSystemDirs(), logs: newLogRotator(o.LogMaxSize, o.LogMaxFiles, o.LogCheckEvery)}, nil
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "runc" }

// Isolated implements runtime.Runtime.
func (r *Runtime) Isolated() bool { return true }

// runc is runc with the runtime's state directory, running args.
func (r *Runtime) runc(args ...string) *exec.Cmd {
	return exec.Command(r.opts.Binary, append([]string{"--root", r.opts.Root}, args...)...)
}

// KillAll kills and deletes every container runc keeps state of under
// root (a node's --root-dir/runc): what a node killed without stopping its
// pods left running. It returns the containers' ids.
func KillAll(binary, root string) ([]string, error) {
	if binary == "" {
		binary = "runc"
	}
	out, err := exec.Command(binary, "--root", root, "list", "-q").Output()
	if err != nil {
		if _, statErr := os.Stat(root); os.IsNotExist(statErr) {
			return nil, nil
		}
		return nil, fmt.Errorf("runc list: %w", err)
	}
	ids := strings.Fields(string(out))
	var errs []error
	for _, id := range ids {
		_ = exec.Command(binary, "--root", root, "kill", id, "KILL").Run()
		if out, err := exec.Command(binary, "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("runc delete %s: %v: %s", id, err, out))
		}
	}
	return ids, errors.Join(errs...)
}

var _ runtime.Resizable = (*container)(nil)
