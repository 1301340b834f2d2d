package podworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/node/images"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/volume"
)

// podSetup is what a pod's containers share on the node: its sandbox, its
// addresses and its volumes.
type podSetup struct {
	sandbox *runtime.Sandbox
	ips     []string
	volumes *volume.Volumes
	// names are the pod's host name and domain.
	names *podNames
	// hostFiles are the pod's /etc/hosts, /etc/hostname and /etc/resolv.conf.
	hostFiles []runtime.Mount
	// volumesAt is when the API's volumes were last written again.
	volumesAt time.Time
	// warned is set once the pod was told it is not isolated.
	warned bool
}

// volumeRefresh is how often configMap, secret and downward API volumes are
// written again, so that updates reach running pods.
const volumeRefresh = time.Minute

// setupPod makes the pod's sandbox, network and volumes, or keeps what a
// previous call (or a previous agent) made; it returns an error worth an
// event, with errConfig for a pod this node cannot run.
func (w *Worker) setupPod(ctx context.Context, pod *corev1.Pod, now time.Time) error {
	rt := w.node.Runtime
	if err := volume.Check(pod); err != nil {
		return fmt.Errorf("%w: %v", errConfig, err)
	}
	if !rt.Isolated() && !w.setup.warned {
		w.setup.warned = true
		w.host.Event(pod, corev1.EventTypeWarning, "NotIsolated", "This node runs containers as host processes (--runtime=%s): the pod shares the host's network, files and the agent's user, and gets no service-account token mounted", rt.Name())
	}
	if _, err := namesOf(pod, w.node.ClusterDomain); err != nil {
		return fmt.Errorf("%w: %v", errConfig, err)
	}
	if w.setup.sandbox == nil {
		sb, err := rt.CreateSandbox(string(pod.UID), filepath.Join(w.podDir(pod), "sandbox"), w.names(pod).kernel, pod.Spec.HostNetwork)
		if err != nil {
			return fmt.Errorf("creating the pod sandbox: %w", err)
		}
		w.setup.sandbox = sb
	}
	if w.setup.ips == nil {
		if sb := w.setup.sandbox; sb.NetNS != "" && w.node.Network != nil {
			ips, err := w.node.Network.Setup(ctx, pod, sb.ID, sb.NetNS)
			if err != nil {
				return fmt.Errorf("setting up the pod network: %w", err)
			}
			for _, ip := range ips {
				w.setup.ips = append(w.setup.ips, ip.String())
			}
		} else {
			w.setup.ips = []string{w.node.IP}
		}
	}
	if rt.Isolated() && w.setup.hostFiles == nil {
		resolv, err := podDNS(ctx, w.node.DNS, pod)
		if err != nil {
			return fmt.Errorf("%w: %v", errConfig, err)
		}
		files, err := writeHostFiles(filepath.Join(w.podDir(pod), "etc"), pod, w.setup.ips, w.names(pod), resolv)
		if err != nil {
			return err
		}
		w.setup.hostFiles = files
	}
	if w.setup.volumes == nil {
		w.setup.volumes = volume.New(pod, filepath.Join(w.podDir(pod), "volumes"), w.node.Volumes, w.node.Allocatable)
		w.setup.volumes.MountImage = w.imageVolumes(pod)
		w.setup.volumes.MemoryBacked = w.node.Runtime.Isolated()
	}
	w.setup.volumes.SetPod(pod)
	refresh := now.Sub(w.setup.volumesAt) >= volumeRefresh
	if err := w.setup.volumes.Setup(ctx, now, refresh); err != nil {
		if errors.Is(err, volume.ErrUnsupported) {
			return fmt.Errorf("%w: %v", errConfig, err)
		}
		return err
	}
	if refresh {
		w.setup.volumesAt = now
	}
	return nil
}

// teardownPod releases the pod's addresses and sandbox, and removes its
// directory: what the kubelet does once a pod is gone.
func (w *Worker) teardownPod(ctx context.Context, pod *corev1.Pod) {
	if sb := w.setup.sandbox; sb != nil {
		if sb.NetNS != "" && w.node.Network != nil {
			if err := w.node.Network.Teardown(ctx, pod, sb.ID, sb.NetNS); err != nil {
				w.host.Event(pod, corev1.EventTypeWarning, "FailedKillPod", "Releasing the pod network: %v", err)
			}
		}
		if err := w.node.Runtime.RemoveSandbox(sb); err != nil {
			klog.ErrorS(err, "Removing the pod sandbox", "pod", klog.KObj(pod))
		}
	}
	w.setup = podSetup{}
	w.node.Local.Forget(pod.UID)
	if imgs := w.node.Images; imgs != nil {
		for _, c := range w.containers {
			if err := imgs.store.Release(w.containerRef(pod, c).ID); err != nil {
				klog.ErrorS(err, "Releasing a container's image layers", "pod", klog.KObj(pod))
			}
		}
	}
	if err := runtime.UnmountUnder(w.podDir(pod)); err != nil {
		// A mount left there may be a hostPath's subPath: removing the
		// directory would remove the host's files through it.
		klog.ErrorS(err, "Unmounting the pod's root filesystems, subPaths and image volumes; its directory stays", "pod", klog.KObj(pod), "dir", w.podDir(pod))
		return
	}
	if imgs := w.node.Images; imgs != nil {
		releaseImageVolumes(imgs, pod)
	}
	if err := os.RemoveAll(w.podDir(pod)); err != nil {
		klog.ErrorS(err, "Removing the pod directory", "pod", klog.KObj(pod))
	}
}

// names are the pod's host name and domain (namesOf), made once; a pod
// whose names cannot be made (setupPod reports it) is named by its name.
func (w *Worker) names(pod *corev1.Pod) podNames {
	if w.setup.names == nil {
		names, err := namesOf(pod, w.node.ClusterDomain)
		if err != nil {
			h := truncateHostname(pod.Name)
			names = podNames{hostname: h, kernel: h}
		}
		w.setup.names = &names
	}
	return *w.setup.names
}

// writeHostFiles writes the pod's /etc/hosts, /etc/hostname and
// /etc/resolv.conf (resolv, by its DNS policy), as the kubelet does.
func writeHostFiles(dir string, pod *corev1.Pod, ips []string, names podNames, resolv []byte) ([]runtime.Mount, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	nodeHosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		nodeHosts = nil
	}
	files := []struct {
		name, dest string
		data       []byte
	}{
		{"hosts", "/etc/hosts", hostsFile(pod, ips, names, nodeHosts)},
		{"hostname", "/etc/hostname", []byte(names.kernel + "\n")},
		{"resolv.conf", "/etc/resolv.conf", resolv},
	}
	var mounts []runtime.Mount
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := atomicfile.WriteFile(p, f.data, 0o644); err != nil {
			return nil, err
		}
		if _, err := os.Stat(f.dest); err == nil {
			// The kubelet's /etc/hosts is writable.
			mounts = append(mounts, runtime.Mount{Source: p, Destination: f.dest, ReadOnly: f.name != "hosts"})
		}
	}
	return mounts, nil
}

// The kubelet's headers of the /etc/hosts it makes: clients (and the
// conformance suite) tell a managed file by them.
const (
	managedHostsHeader                = "# Kubernetes-managed hosts file.\n"
	managedHostsHeaderWithHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
)

// hostsFile is the pod's /etc/hosts as the kubelet writes it: on the pod
// network, localhost entries and the pod's addresses with its host name
// (and its name in its domain first, with a subdomain); on the host's, the
// node's own file (nodeHosts); then the pod's hostAliases.
func hostsFile(pod *corev1.Pod, ips []string, names podNames, nodeHosts []byte) []byte {
	var b strings.Builder
	if pod.Spec.HostNetwork {
		b.WriteString(managedHostsHeaderWithHostNetwork)
		b.Write(nodeHosts)
	} else {
		b.WriteString(managedHostsHeader)
		b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
		b.WriteString("fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
		for _, ip := range ips {
			if names.domain != "" {
				fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, names.hostname, names.domain, names.hostname)
			} else {
				fmt.Fprintf(&b, "%s\t%s\n", ip, names.hostname)
			}
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, h := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", h.IP, strings.Join(h.Hostnames, "\t"))
		}
	}
	return []byte(b.String())
}

// containerConfig returns the current run of container c as the runtime
// runs it (buildRun, from what the worker knows of the pod and the node),
// or an error (errConfig for one this node cannot run). img is the
// container's image, nil for a host root; expand expands $(VAR) in its
// command and args. Once built, the image's layers are leased for the run
// and its termination-log file made.
func (w *Worker) containerConfig(pod *corev1.Pod, c *container, env []string, expand func(string) string, img *pulledImage) (*runtime.ContainerConfig, error) {
	f := runFacts{ref: w.containerRef(pod, c), env: env, expand: expand, image: img, sandbox: w.setup.sandbox, hostname: w.names(pod).kernel,
		hostFiles: w.setup.hostFiles, logPath: w.logPath(pod, c), node: w.nodeFacts(),
		mounts: func(c *corev1.Container) ([]runtime.Mount, error) {
			return w.setup.volumes.Mounts(c, w.node.Runtime.Isolated())
		},
		readImageFile: imageFiles(img), stat: os.Stat}
	if c.target != "" {
		f.targetName = c.target
		if i := slices.IndexFunc(w.containers, func(t *container) bool { return t.spec.Name == c.target && !t.ephemeral }); i >= 0 {
			f.target = w.containers[i].run
		}
	}
	cfg, err := buildRun(pod, &c.spec, f)
	if err != nil || !w.node.Runtime.Isolated() {
		return cfg, err
	}
	if img != nil {
		// The layers stay while the container stacks them, even if the
		// image is removed meanwhile.
		if err := w.node.Images.store.Lease(cfg.ID, img.Image); err != nil {
			return nil, err
		}
		// Garbage collection goes by the minute: a crash loop or a
		// hundred pods starting need not rewrite the store's index each.
		if time.Since(img.LastUsed) > time.Minute {
			if err := w.node.Images.store.Used(img.ID); err != nil {
				klog.ErrorS(err, "Recording an image's use", "image", img.ID)
			}
		}
	}
	if c.spec.TerminationMessagePath != "" {
		// A fresh file each run: a message never outlives its run.
		if err := freshFile(terminationLogPath(cfg.Dir, c.restarts)); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// nodeFacts are the node's settings every run is built with.
func (w *Worker) nodeFacts() nodeFacts {
	memory := w.node.Allocatable[corev1.ResourceMemory]
	return nodeFacts{isolated: w.node.Runtime.Isolated(), stopPodsOnExit: w.node.StopPodsOnExit, seccompDefault: w.node.SeccompDefault,
		appArmor: appArmorEnabled(), seccompDir: filepath.Join(w.node.RootDir, "seccomp"), pidsLimit: w.node.PodPidsLimit, memory: memory.Value()}
}

// imageFiles reads the files of img's layers as the container sees them;
// nil for a host root.
func imageFiles(img *pulledImage) func(string) ([]byte, error) {
	if img == nil {
		return nil
	}
	return func(p string) ([]byte, error) { return images.ReadFile(img.layers, p) }
}

// confineMounts makes every mount's destination an absolute path without
// "..": a mountPath or terminationMessagePath of "/../../etc/nologin" is
// the container's /etc/nologin, as the kernel resolves "/.." to "/", never
// a path the agent would follow out of the container's root.
func confineMounts(mounts []runtime.Mount) {
	for i := range mounts {
		mounts[i].Destination = path.Clean("/" + mounts[i].Destination)
	}
}

// containerRef names container c of pod for the runtime: its id, its
// directory and the run it is at.
func (w *Worker) containerRef(pod *corev1.Pod, c *container) *runtime.ContainerConfig {
	return &runtime.ContainerConfig{ID: fmt.Sprintf("%s_%s", pod.UID, c.spec.Name), Dir: filepath.Join(w.podDir(pod), c.spec.Name), Run: c.restarts}
}

func terminationLogPath(containerDir string, run int32) string {
	return filepath.Join(containerDir, fmt.Sprintf("termination-log-%d", run))
}

// hostRoot tells whether pod's containers run host commands rather than
// their images: under the process runtime, or in the host runtime class.
func (w *Worker) hostRoot(pod *corev1.Pod) bool {
	return !w.node.Runtime.Isolated() || usesHostRoot(pod)
}

// image returns c's image, pulled if its policy says so; nil for a host
// root.
func (w *Worker) image(ctx context.Context, pod *corev1.Pod, c *container) (*pulledImage, error) {
	if w.hostRoot(pod) {
		return nil, nil
	}
	imgs := w.node.Images
	if imgs == nil {
		return nil, fmt.Errorf("%w: this node agent has no image store; run pods of runtime class %s", errConfig, runtime.HostRuntimeClass)
	}
	return imgs.ensure(ctx, pod, &c.spec, func() []corev1.Secret { return w.pullSecrets(ctx, pod) },
		func(eventType, reason, format string, args ...any) {
			w.host.Event(pod, eventType, reason, format, args...)
		})
}

// env is c's environment over its image's (img, nil for a host root), and
// the expansion of its command and args.
func (w *Worker) env(ctx context.Context, pod *corev1.Pod, c *container, img *pulledImage) ([]string, func(string) string, error) {
	var base []string
	if img != nil {
		base = img.config.Config.Env
	}
	services, err := w.host.ServiceEnv(pod, w.static)
	if err != nil {
		return nil, nil, err
	}
	return containerEnv(ctx, pod, &c.spec, envInputs{podIPs: w.setup.ips, hostIP: w.node.IP, base: base, hostname: w.names(pod).kernel,
		source: w.node.Volumes, allocatable: w.node.Allocatable, services: services})
}

// maxHostnameLen is the longest host name Linux takes (HOST_NAME_MAX).
const maxHostnameLen = 63
