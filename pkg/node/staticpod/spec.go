package staticpod

import (
	"fmt"
	"path/filepath"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
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

// Spec is a steadyplane component as a static pod: what "up" (and a
// worker's "node") writes into a manifest directory for the node agent.
type Spec struct {
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
func (c Spec) Pod() *corev1.Pod {
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

// Write writes pod into the manifest directory dir as <name>.yaml,
// atomically and 0600 (it names the files that hold keys).
func Write(dir string, pod *corev1.Pod) error {
	data, err := yaml.Marshal(pod)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, pod.Name+".yaml"), data, 0o600)
}
