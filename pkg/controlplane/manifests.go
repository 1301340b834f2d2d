package controlplane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	netutils "k8s.io/utils/net"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// HostPath is a file or directory of the host a component uses, mounted at
// the same path in its container.
type HostPath struct {
	Path     string
	ReadOnly bool
	// File makes a writable path a file created if missing (a lock
	// file), not a directory.
	File bool
}

// Component is a control-plane component as a static pod.
type Component struct {
	// Name is the pod's name (kube-apiserver, etcd, ...) and its container's.
	Name string
	// Binary is the steadyplane executable the container runs, Args its
	// arguments (the component's subcommand first).
	Binary string
	Args   []string
	// HostPaths are what it reads and writes on the host.
	HostPaths []HostPath
	// Liveness is an HTTPS GET that tells it is alive; nil for none.
	Liveness *HTTPSCheck
	// Readiness is an HTTPS GET that tells it serves; nil makes it Ready
	// once it runs.
	Readiness *HTTPSCheck
	// Privileged gives the container every capability and a writable
	// /proc/sys (kube-proxy programs the node's packet filter).
	Privileged bool
}

// HTTPSCheck is a GET https://<Host>:<Port><Path>.
type HTTPSCheck struct {
	// Host is the address the component listens on; "" is 127.0.0.1.
	Host string
	Port int
	Path string
}

func (h *HTTPSCheck) handler() corev1.ProbeHandler {
	host := h.Host
	if host == "" {
		host = "127.0.0.1"
	}
	return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: host, Port: intstr.FromInt(h.Port), Path: h.Path, Scheme: corev1.URISchemeHTTPS}}
}

// Pod is the component's static pod, as kubeadm writes one: in kube-system,
// on the host's network, system-node-critical, restarted always, its files
// by hostPath (the binary's directory read-only).
func (c Component) Pod() *corev1.Pod {
	paths := append([]HostPath{{Path: filepath.Dir(c.Binary), ReadOnly: true}}, c.HostPaths...)
	sort.SliceStable(paths, func(i, j int) bool { return paths[i].Path < paths[j].Path })
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	for i, p := range paths {
		name := fmt.Sprintf("host-%d", i)
		source := &corev1.HostPathVolumeSource{Path: p.Path}
		if !p.ReadOnly {
			// What a component writes (etcd's data, generated certificates)
			// may not exist before its first start.
			t := corev1.HostPathDirectoryOrCreate
			if p.File {
				t = corev1.HostPathFileOrCreate
			}
			source.Type = &t
		}
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: source}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: p.Path, ReadOnly: p.ReadOnly})
	}
	grace := int64(30)
	container := corev1.Container{
		Name: c.Name, Image: "steadyplane", Command: append([]string{c.Binary}, c.Args...), VolumeMounts: mounts,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if c.Privileged {
		container.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	}
	if c.Liveness != nil {
		container.LivenessProbe = &corev1.Probe{ProbeHandler: c.Liveness.handler(),
			InitialDelaySeconds: 10, PeriodSeconds: 10, TimeoutSeconds: 15, FailureThreshold: 8,
		}
	}
	if c.Readiness != nil {
		// As kubeadm's: asked every second, so that Ready (what the
		// KubeAPIServer operator waits for before it rolls the next node)
		// follows the server within a second or so.
		container.ReadinessProbe = &corev1.Probe{ProbeHandler: c.Readiness.handler(), PeriodSeconds: 1, TimeoutSeconds: 15, FailureThreshold: 3}
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"component": c.Name, "tier": "control-plane"}},
		Spec: corev1.PodSpec{
			// The component runs from the host's binary and libraries, not
			// from an image.
			RuntimeClassName: ptr.To(runtime.HostRuntimeClass),
			HostNetwork:      true, PriorityClassName: "system-node-critical", RestartPolicy: corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace, Volumes: volumes, Containers: []corev1.Container{container},
		},
	}
}

// WriteManifest writes pod into the manifest directory as <name>.yaml,
// atomically and 0600 (it names the files that hold keys).
func WriteManifest(dir string, pod *corev1.Pod) error {
	data, err := yaml.Marshal(pod)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, pod.Name+".yaml"), data, 0o600)
}

// InstallBinary copies the executable at src into dir as
// steadyplane-<hash>, unless that copy exists, and returns its path: static
// pods name a binary that outlives "go run"'s temporary one, and a new
// build gets a new name, so a manifest changes exactly when its binary does.
func InstallBinary(src, dir string) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", src, err)
	}
	dst := filepath.Join(dir, "steadyplane-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	return dst, atomicfile.WriteFrom(dst, f, 0o700)
}

// Components returns etcd, the API server, the controller manager, the
// scheduler and the readiness controller of this control plane as static
// pods running binary, with the same arguments as their processes and the
// host paths each one uses.
func (cp *ControlPlane) Components(binary string) []Component {
	pki := HostPath{Path: filepath.Join(cp.dataDir, "pki"), ReadOnly: true}
	list := []Component{
		{Name: "etcd", Binary: binary, Args: cp.Etcd.Args, HostPaths: []HostPath{pki, {Path: filepath.Join(cp.dataDir, "etcd")}}},
		{Name: "kube-apiserver", Binary: binary, Args: cp.APIServer.Args,
			HostPaths: []HostPath{pki, {Path: filepath.Join(cp.dataDir, "apiserver-certs")}, {Path: cp.admissionConfigDir(), ReadOnly: true}},
			Liveness:  &HTTPSCheck{Host: cp.probeHost(), Port: cp.opts.APIServerPort, Path: "/livez"},
			// Without it, a revision that crashes is Ready for the moment
			// it runs, and the operator would take that for a rollout done.
			Readiness: &HTTPSCheck{Host: cp.probeHost(), Port: cp.opts.APIServerPort, Path: "/readyz"}},
	}
	if cp.ControllerManager != nil {
		list = append(list,
			Component{Name: "kube-controller-manager", Binary: binary, Args: cp.ControllerManager.Args,
				HostPaths: []HostPath{pki, {Path: filepath.Join(cp.dataDir, "controller-manager.kubeconfig"), ReadOnly: true}, {Path: filepath.Join(cp.dataDir, "controller-manager")}},
				Liveness:  &HTTPSCheck{Port: cp.opts.ControllerManagerPort, Path: "/healthz"}},
			Component{Name: "kube-scheduler", Binary: binary, Args: cp.Scheduler.Args,
				HostPaths: []HostPath{{Path: filepath.Join(cp.dataDir, "scheduler.kubeconfig"), ReadOnly: true}},
				Liveness:  &HTTPSCheck{Port: cp.opts.SchedulerPort, Path: "/healthz"}})
	}
	if cp.fallbackOn() {
		kubeconfig := filepath.Join(cp.dataDir, "kubeapiserver-operator.kubeconfig")
		// The node's name as its identity in the Lease: one operator per
		// node (a static pod), and a restarted one takes its lease back at
		// once instead of waiting out its predecessor's.
		args := []string{"operator", "--kubeconfig=" + kubeconfig, "--identity=" + cp.opts.NodeName,
			"--retry-base=" + cp.opts.FallbackRetryBase.String(), "--retry-max=" + cp.opts.FallbackRetryMax.String()}
		if cp.opts.Fallback == fallback.ModeOn {
			args = append(args, "--topology=on")
		}
		if cp.opts.OperatorMetricsPort != 0 {
			args = append(args, "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(cp.opts.OperatorMetricsPort))
		}
		list = append(list, Component{Name: operatorPod, Binary: binary, Args: args,
			HostPaths: []HostPath{pki, {Path: kubeconfig, ReadOnly: true}}})
	}
	if cp.Proxy != nil {
		list = append(list, proxyPod(binary, cp.Proxy.Args, filepath.Join(cp.dataDir, "kube-proxy.kubeconfig")))
	}
	if cp.Readiness != nil {
		list = append(list, Component{Name: readinessPod, Binary: binary, Args: cp.Readiness.Args,
			HostPaths: []HostPath{pki, {Path: filepath.Join(cp.dataDir, "readiness-controller.kubeconfig"), ReadOnly: true}}})
	}
	return list
}

// probeHost is where the API server's liveness probe reaches it: its
// --bind-address (a server on a host address does not listen on
// loopback), or loopback when it listens on every address.
func (cp *ControlPlane) probeHost() string {
	if ip := netutils.ParseIPSloppy(cp.opts.BindAddress); ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	return "127.0.0.1"
}
