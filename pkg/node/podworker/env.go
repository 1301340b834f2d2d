package podworker

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/api/v1/resource"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/kubernetes/pkg/fieldpath"
	"k8s.io/kubernetes/pkg/kubelet/envvars"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"

	"github.com/steadyplane/steadyplane/pkg/node/volume"
)

// defaultPath is the PATH of a container whose image sets none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// envInputs is what a container's environment is made of besides its pod
// and its spec.
type envInputs struct {
	podIPs []string
	hostIP string
	// base is the image's environment (nil for a host root).
	base []string
	// source reads the ConfigMaps and Secrets env and envFrom name.
	source volume.Source
	// allocatable is what resourceFieldRef reports for a limit the
	// container does not set, as the kubelet does.
	allocatable corev1.ResourceList
	// services are the service variables (serviceEnvVars): the
	// container's own override them, and they expand in its values.
	services map[string]string
	// hostname is the pod's UTS host name (podNames.kernel); "" for the
	// pod's name.
	hostname string
}

// containerEnv returns the environment of container c of pod, as the
// kubelet makes it: in.base (its image's; a default PATH when it sets none)
// and HOSTNAME, then the container's envFrom sources in order (each key
// with its prefix; keys that are no variable name, even a relaxed one, are
// left out), then its
// env in order, each value with $(VAR) references to the variables before
// it expanded ($$ escapes), or from a ConfigMap or Secret key, a field of
// the pod or a resource of a container. It also returns the expansion by
// the container's own variables, for its command and args (the image's are
// not expanded, as the kubelet).
func containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, in envInputs) ([]string, func(string) string, error) {
	base := in.base
	if !slices.ContainsFunc(base, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		base = append([]string{defaultPath}, base...)
	}
	own := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := own[k]; !ok {
			order = append(order, k)
		}
		own[k] = v
	}
	for _, from := range c.EnvFrom {
		data, err := envFromData(ctx, pod.Namespace, from, in.source)
		if err != nil {
			return nil, nil, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			name := from.Prefix + k
			// Any printable name but with "=", as Kubernetes takes them
			// since relaxed variable names (1-data-1 is one).
			if errs := validation.IsRelaxedEnvVarName(name); len(errs) > 0 {
				klog.InfoS("Leaving out an envFrom key that is no variable name", "pod", klog.KObj(pod), "container", c.Name, "key", name)
				continue
			}
			set(name, data[k])
		}
	}
	mapping := expansion.MappingFuncFor(own, in.services)
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expansion.Expand(e.Value, mapping))
			continue
		}
		v, ok, err := envValueFrom(ctx, pod, c, e, in)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: env %s: %v", errConfig, e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	env := make([]string, 0, len(order)+len(in.services))
	for _, k := range order {
		env = append(env, k+"="+own[k])
	}
	for _, k := range slices.Sorted(maps.Keys(in.services)) {
		if _, ok := own[k]; !ok {
			env = append(env, k+"="+in.services[k])
		}
	}
	hostname := in.hostname
	if hostname == "" {
		hostname = truncateHostname(pod.Name)
	}
	env = mergeEnv(mergeEnv(base, []string{"HOSTNAME=" + hostname}), env)
	return env, func(s string) string { return expansion.Expand(s, mapping) }, nil
}

// envFromData returns the data of an envFrom source; an optional one that
// does not exist gives none.
func envFromData(ctx context.Context, ns string, from corev1.EnvFromSource, src volume.Source) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		cm, found, err := volume.ConfigMapOf(ctx, src, ns, from.ConfigMapRef.Name, optional(from.ConfigMapRef.Optional))
		if err != nil {
			return nil, fmt.Errorf("%w: envFrom: %v", errConfig, err)
		}
		if !found {
			return nil, nil
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		s, found, err := volume.SecretOf(ctx, src, ns, from.SecretRef.Name, optional(from.SecretRef.Optional))
		if err != nil {
			return nil, fmt.Errorf("%w: envFrom: %v", errConfig, err)
		}
		if !found {
			return nil, nil
		}
		out := make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

// envValueFrom returns the value of an env entry with valueFrom; false for
// an optional key that is not there (the variable is left out).
func envValueFrom(ctx context.Context, pod *corev1.Pod, c *corev1.Container, e corev1.EnvVar, in envInputs) (string, bool, error) {
	from := e.ValueFrom
	switch {
	case from.FieldRef != nil:
		v, err := fieldValue(pod, from.FieldRef.FieldPath, in.podIPs, in.hostIP)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		name := from.ResourceFieldRef.ContainerName
		if name == "" {
			name = c.Name
		}
		v, err := resource.ExtractResourceValueByContainerNameAndNodeAllocatable(from.ResourceFieldRef, pod, name, in.allocatable)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, found, err := volume.ConfigMapOf(ctx, in.source, pod.Namespace, ref.Name, optional(ref.Optional))
		if err != nil || !found {
			return "", false, err
		}
		v, ok := cm.Data[ref.Key]
		return v, ok, keyMissing(ok, ref.Optional, ref.Key, "ConfigMap", pod.Namespace, ref.Name)
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, found, err := volume.SecretOf(ctx, in.source, pod.Namespace, ref.Name, optional(ref.Optional))
		if err != nil || !found {
			return "", false, err
		}
		v, ok := s.Data[ref.Key]
		return string(v), ok, keyMissing(ok, ref.Optional, ref.Key, "Secret", pod.Namespace, ref.Name)
	}
	return "", false, fmt.Errorf("no value source the steadyplane node agent knows")
}

// keyMissing is the error of a key not in its ConfigMap or Secret, unless
// it is there (ok) or optional.
func keyMissing(ok bool, opt *bool, key, kind, ns, name string) error {
	if ok || optional(opt) {
		return nil
	}
	return fmt.Errorf("couldn't find key %s in %s %s/%s", key, kind, ns, name)
}

func optional(b *bool) bool { return b != nil && *b }

// fieldValue is a pod field as the kubelet gives it to env: the status and
// spec fields it knows itself, the rest (metadata, labels['k'],
// annotations['k']) by upstream's field paths.
func fieldValue(pod *corev1.Pod, path string, podIPs []string, hostIP string) (string, error) {
	switch path {
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		if len(podIPs) == 0 {
			return "", nil
		}
		return podIPs[0], nil
	case "status.podIPs":
		return strings.Join(podIPs, ","), nil
	case "status.hostIP", "status.hostIPs":
		return hostIP, nil
	}
	return fieldpath.ExtractFieldPathAsString(pod, path)
}

// ServiceEnvVars are the variables the kubelet gives pod's containers for
// services (upstream's envvars.FromServices: FOO_SERVICE_HOST,
// FOO_SERVICE_PORT, FOO_PORT_80_TCP, ... for Service foo): those of its
// namespace that have a cluster IP, unless enableServiceLinks is false, and
// always the API server's ("kubernetes" in namespace default), which is
// how clients in pods find it (client-go's InClusterConfig).
func ServiceEnvVars(pod *corev1.Pod, objs []any) map[string]string {
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	byName := map[string]*corev1.Service{}
	for _, o := range objs {
		svc, ok := o.(*corev1.Service)
		if !ok || !v1helper.IsServiceIPSet(svc) {
			continue
		}
		switch {
		case svc.Namespace == metav1.NamespaceDefault && svc.Name == "kubernetes":
			if _, ok := byName[svc.Name]; !ok {
				byName[svc.Name] = svc
			}
		case svc.Namespace == pod.Namespace && links:
			byName[svc.Name] = svc
		}
	}
	if len(byName) == 0 {
		return nil
	}
	services := make([]*corev1.Service, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		services = append(services, byName[name])
	}
	vars := map[string]string{}
	for _, e := range envvars.FromServices(services) {
		vars[e.Name] = e.Value
	}
	return vars
}

// withSubPathExprs returns c with each volumeMount's subPathExpr expanded
// into its subPath by the container's environment env, as the kubelet
// does: a variable that is unset or empty is an error (the container
// waits with CreateContainerConfigError until, say, the annotation it
// reads is set), and so is a result that is absolute or climbs out of the
// volume. c is not changed.
func withSubPathExprs(c *corev1.Container, env []string) (*corev1.Container, error) {
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.SubPathExpr != "" }) {
		return c, nil
	}
	vars := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	out := c.DeepCopy()
	for i, m := range out.VolumeMounts {
		if m.SubPathExpr == "" {
			continue
		}
		var missing []string
		path := expansion.Expand(m.SubPathExpr, func(k string) string {
			if vars[k] == "" && !slices.Contains(missing, k) {
				missing = append(missing, k)
			}
			return vars[k]
		})
		switch {
		case len(missing) > 0:
			return nil, fmt.Errorf("%w: volume mount %q: subPathExpr %q: missing value for %s", errConfig, m.Name, m.SubPathExpr, strings.Join(missing, ", "))
		case filepath.IsAbs(path):
			return nil, fmt.Errorf("%w: volume mount %q: subPathExpr %q expands to %q, which must be a relative path", errConfig, m.Name, m.SubPathExpr, path)
		case slices.Contains(strings.Split(filepath.ToSlash(path), "/"), ".."):
			return nil, fmt.Errorf("%w: volume mount %q: subPathExpr %q expands to %q, which must not contain '..'", errConfig, m.Name, m.SubPathExpr, path)
		}
		out.VolumeMounts[i].SubPath, out.VolumeMounts[i].SubPathExpr = path, ""
	}
	return out, nil
}
