package podworker

import (
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/qos"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// runFacts are what a container's run is made of besides its pod and its
// spec: what the worker gathered (the image, the environment, the pod's
// sandbox and host files) and the node's settings. The reads the
// decisions need (the image's files, the volumes' mounts, the host's mount
// points) are injected, so that buildRun is tested on fakes.
type runFacts struct {
	// ref names the run: its container ID, directory and run number.
	ref *runtime.ContainerConfig
	// env is the container's environment, expand the expansion of its
	// command and args.
	env    []string
	expand func(string) string
	// image is the container's image; nil for a host root.
	image *pulledImage
	// sandbox, hostname and hostFiles are the pod's.
	sandbox   *runtime.Sandbox
	hostname  string
	hostFiles []runtime.Mount
	// logPath is where the run logs.
	logPath string
	// targetName is the container whose PID namespace an ephemeral
	// container joins (kubectl debug --target), "" for none; target is its
	// run, nil when it does not run.
	targetName string
	target     runtime.Container
	node       nodeFacts
	// mounts returns the volume mounts of a container whose subPathExprs
	// are expanded.
	mounts func(*corev1.Container) ([]runtime.Mount, error)
	// readImageFile reads a file of the image (its users and groups).
	readImageFile func(string) ([]byte, error)
	// stat is os.Stat on the host, for mount points in its system
	// directories.
	stat func(string) (os.FileInfo, error)
}

// nodeFacts are the node's settings that shape every run.
type nodeFacts struct {
	// isolated: the runtime isolates containers (runc), not host processes.
	isolated bool
	// stopPodsOnExit makes runs die with a crashing agent.
	stopPodsOnExit bool
	// seccompDefault gives containers naming no profile RuntimeDefault;
	// seccompDir holds Localhost profiles.
	seccompDefault bool
	seccompDir     string
	// appArmor says whether the kernel enforces AppArmor.
	appArmor bool
	// pidsLimit caps a container's processes (0: none).
	pidsLimit int64
	// memory is the node's allocatable memory in bytes (OOM scores).
	memory int64
}

// buildRun turns container spec of pod and the facts f into the run the
// runtime starts, or says why this node cannot run it (errConfig), as the
// kubelet's container manager decides: the command from the spec and the
// image, the security context against the image's user, seccomp, sysctls,
// resources, and the mounts (the pod's host files, its volumes, the
// termination-log file). It decides only: the image's layers are leased
// and the termination-log file made by the worker once it is built.
func buildRun(pod *corev1.Pod, spec *corev1.Container, f runFacts) (*runtime.ContainerConfig, error) {
	var imgCfg v1.Config
	if f.image == nil {
		if err := checkForRuntime(pod, spec, f.node.isolated); err != nil {
			return nil, err
		}
	} else {
		imgCfg = f.image.config.Config
	}
	cfg := *f.ref
	cfg.Sandbox, cfg.Hostname, cfg.Env, cfg.WorkingDir = f.sandbox, f.hostname, f.env, spec.WorkingDir
	if cfg.WorkingDir == "" {
		cfg.WorkingDir = imgCfg.WorkingDir
	}
	cfg.Argv = imageArgv(spec, imgCfg, f.expand)
	if len(cfg.Argv) == 0 {
		return nil, fmt.Errorf("%w: container %s: no command specified, by the container or its image", errConfig, spec.Name)
	}
	cfg.LogPath, cfg.DieWithAgent = f.logPath, f.node.stopPodsOnExit
	if !f.node.isolated {
		return &cfg, nil
	}
	cfg.Stdin, cfg.StdinOnce, cfg.TTY = spec.Stdin, spec.StdinOnce, spec.TTY
	if err := isolation(pod, spec, &cfg, f); err != nil {
		return nil, err
	}
	mounts, err := runMounts(pod, spec, &cfg, f)
	if err != nil {
		return nil, err
	}
	cfg.Mounts = mounts
	return &cfg, nil
}

// isolation sets what an isolated run is confined by: the target's PID
// namespace, the security context, seccomp, sysctls and resources.
func isolation(pod *corev1.Pod, spec *corev1.Container, cfg *runtime.ContainerConfig, f runFacts) error {
	if f.targetName != "" {
		// kubectl debug --target: the ephemeral container sees the
		// target's processes.
		if f.target == nil {
			return fmt.Errorf("target container %q is not running", f.targetName)
		}
		ns, ok := f.target.(runtime.PIDNamespaced)
		if !ok {
			return fmt.Errorf("%w: the runtime cannot share the PID namespace of target container %q", errConfig, f.targetName)
		}
		cfg.PIDNamespace = ns.PIDNamespace()
	}
	if err := securityConfig(pod, spec, cfg, f.image, f.readImageFile); err != nil {
		return err
	}
	if err := checkUnsupported(pod, spec, f.node.appArmor); err != nil {
		return err
	}
	var err error
	if cfg.Seccomp, err = seccompProfile(pod, spec, f.node.seccompDefault, f.node.seccompDir); err != nil {
		return err
	}
	if cfg.Sysctls, err = podSysctls(pod); err != nil {
		return err
	}
	cfg.Resources = runtimeResources(spec.Resources)
	cfg.PidsLimit = f.node.pidsLimit
	cfg.OOMScoreAdj = qos.GetContainerOOMScoreAdjust(pod, spec, f.node.memory)
	return nil
}

// runMounts are an isolated run's mounts: the pod's host files, the
// container's volumes (subPathExprs expanded by its environment; on a host
// root, only where the host has the mount point), the termination-log file,
// every destination confined to the container's root. An image's run gets
// its layers as root filesystem.
func runMounts(pod *corev1.Pod, spec *corev1.Container, cfg *runtime.ContainerConfig, f runFacts) ([]runtime.Mount, error) {
	withSubPaths, err := withSubPathExprs(spec, f.env)
	if err != nil {
		return nil, err
	}
	volumes, err := f.mounts(withSubPaths)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errConfig, err)
	}
	if f.image == nil {
		for _, m := range volumes {
			if err := checkMountPoint(m, f.stat); err != nil {
				return nil, err
			}
		}
	} else {
		cfg.Rootfs = &runtime.Rootfs{Layers: f.image.layers}
	}
	mounts := append(append([]runtime.Mount{}, f.hostFiles...), volumes...)
	if p := spec.TerminationMessagePath; p != "" {
		// A fresh file each run: a message never outlives its run.
		mounts = append(mounts, runtime.Mount{Source: terminationLogPath(cfg.Dir, cfg.Run), Destination: p})
	}
	confineMounts(mounts)
	return mounts, nil
}
