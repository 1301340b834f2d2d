package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/securitycontext"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"

	"github.com/steadyplane/steadyplane/pkg/logfile"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
)

// errConfig marks a container whose configuration cannot be run here
// (CreateContainerConfigError), as opposed to a start failure.
var errConfig = errors.New("container configuration")

// Reasons of container states, as the kubelet gives them.
const (
	ReasonContainerCreating          = "ContainerCreating"
	ReasonPodInitializing            = "PodInitializing"
	ReasonCrashLoopBackOff           = "CrashLoopBackOff"
	ReasonCreateContainerConfigError = "CreateContainerConfigError"
	ReasonRunContainerError          = "RunContainerError"
	ReasonCompleted                  = "Completed"
	ReasonError                      = "Error"
	ReasonOOMKilled                  = "OOMKilled"
	ReasonContainerCannotRun         = "ContainerCannotRun"
)

// terminatedReason is the reason of a run that ended with exit.
func terminatedReason(exit runtime.Exit) string {
	switch {
	case exit.OOMKilled:
		return ReasonOOMKilled
	case exit.ExitCode == 0:
		return ReasonCompleted
	}
	return ReasonError
}

// containerEnv returns the environment of container c of pod: a base PATH,
// then c.Env in order with $(VAR) references expanded and the downward API
// fields the agent knows. Values from Secrets or ConfigMaps are refused.
func containerEnv(pod *corev1.Pod, c *corev1.Container, podIP, hostIP string) ([]string, error) {
	vars := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME": pod.Name}
	order := []string{"PATH", "HOSTNAME"}
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	mapping := expansion.MappingFuncFor(vars)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expansion.Expand(e.Value, mapping))
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath, podIP, hostIP)
			if err != nil {
				return nil, fmt.Errorf("%w: env %s: %v", errConfig, e.Name, err)
			}
			set(e.Name, v)
		default:
			return nil, fmt.Errorf("%w: env %s: values from Secrets, ConfigMaps and resources are not supported by the steadyplane node agent", errConfig, e.Name)
		}
	}
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("%w: envFrom is not supported by the steadyplane node agent", errConfig)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

func fieldValue(pod *corev1.Pod, path, podIP, hostIP string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return podIP, nil
	case "status.hostIP":
		return hostIP, nil
	}
	return "", fmt.Errorf("field %q is not supported", path)
}

// securityConfig applies the container's effective security context (the
// pod's, overridden by the container's) to cfg. Images are not read here, so
// a container without runAsUser runs as root, and runAsNonRoot without a
// non-zero runAsUser is refused, as the kubelet refuses an image whose user
// is root.
func securityConfig(pod *corev1.Pod, c *corev1.Container, cfg *runtime.ContainerConfig) error {
	sc := securitycontext.DetermineEffectiveSecurityContext(pod, c)
	if sc == nil {
		return nil
	}
	var uid int64
	if sc.RunAsUser != nil {
		uid = *sc.RunAsUser
	}
	if sc.RunAsNonRoot != nil && *sc.RunAsNonRoot && uid == 0 {
		return fmt.Errorf("%w: container has runAsNonRoot and will run as root (set a non-zero runAsUser: the node agent does not read images)", errConfig)
	}
	if sc.RunAsUser != nil || sc.RunAsGroup != nil {
		u := &runtime.User{UID: uint32(uid), GID: uint32(uid)}
		if sc.RunAsGroup != nil {
			u.GID = uint32(*sc.RunAsGroup)
		}
		if psc := pod.Spec.SecurityContext; psc != nil {
			for _, g := range psc.SupplementalGroups {
				u.AdditionalGIDs = append(u.AdditionalGIDs, uint32(g))
			}
			if psc.FSGroup != nil {
				u.AdditionalGIDs = append(u.AdditionalGIDs, uint32(*psc.FSGroup))
			}
		}
		cfg.User = u
	}
	cfg.ReadOnlyRootFilesystem = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
	cfg.Privileged = sc.Privileged != nil && *sc.Privileged
	cfg.NoNewPrivileges = securitycontext.AddNoNewPrivileges(sc)
	if sc.Capabilities != nil {
		for _, a := range sc.Capabilities.Add {
			cfg.CapAdd = append(cfg.CapAdd, string(a))
		}
		for _, d := range sc.Capabilities.Drop {
			cfg.CapDrop = append(cfg.CapDrop, string(d))
		}
	}
	return nil
}

// resourceConfig applies the container's memory and cpu limits to cfg.
func resourceConfig(c *corev1.Container, cfg *runtime.ContainerConfig) {
	if m, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		cfg.MemoryLimit = m.Value()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		cfg.CPUMillis = q.MilliValue()
	}
}

// readsOnlyFiles checks that an isolated container asks for nothing a host
// process runtime would have to ignore, and that a host process asks for no
// isolation it cannot have.
func checkForRuntime(pod *corev1.Pod, c *corev1.Container, isolated bool) error {
	if len(c.Command) == 0 {
		return fmt.Errorf("%w: container %s has no command; the steadyplane node agent runs commands from the host's system directories and does not pull or read images (image %q is recorded only)", errConfig, c.Name, c.Image)
	}
	if isolated {
		return nil
	}
	for _, v := range pod.Spec.Volumes {
		if !isServiceAccountAutomount(v) {
			return fmt.Errorf("%w: volumes need the runc runtime; this node runs host processes (--runtime=process)", errConfig)
		}
	}
	if sc := securitycontext.DetermineEffectiveSecurityContext(pod, c); sc != nil && (sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem) {
		return fmt.Errorf("%w: runAsUser, runAsGroup and readOnlyRootFilesystem need the runc runtime; this node runs host processes (--runtime=process)", errConfig)
	}
	return nil
}

// isServiceAccountAutomount tells the service-account token volume that the
// ServiceAccount admission plugin adds to every pod: host processes cannot
// mount it, and refusing it would refuse every pod, so it is left unmounted
// on a node that is not isolated (which each pod's NotIsolated event says).
func isServiceAccountAutomount(v corev1.Volume) bool {
	return strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil
}

// checkMountPoint refuses a mount inside a read-only system directory
// whose mount point does not exist on the host and cannot be made there:
// the runc runtime makes an empty directory for a directory source (as a
// revision's /etc/kubernetes/static-pod-resources), nothing for a file.
func checkMountPoint(m runtime.Mount) error {
	// runc binds these read-only into every container: a mount point in
	// them must exist on the host, or be one runc makes.
	for _, dir := range runc.SystemDirs {
		if !strings.HasPrefix(m.Destination, dir+"/") {
			continue
		}
		if _, err := os.Stat(m.Destination); err == nil {
			return nil
		}
		if st, err := os.Stat(m.Source); err == nil && st.IsDir() {
			return nil
		}
		return fmt.Errorf("%w: mount path %s is inside the read-only %s of the host and does not exist there", errConfig, m.Destination, dir)
	}
	return nil
}

// terminationMessage reads the container's termination message, as the
// kubelet does: the file the run wrote (at most 4 KiB), or, with
// FallbackToLogsOnError and a failure, the end of the log.
func terminationMessage(c *corev1.Container, messagePath, logPath string, exitCode int32) string {
	if messagePath != "" {
		if st, err := os.Stat(messagePath); err == nil && st.Mode().IsRegular() {
			if f, err := os.Open(messagePath); err == nil {
				defer f.Close()
				b, _ := io.ReadAll(io.LimitReader(f, 4096))
				if len(b) > 0 {
					return string(b)
				}
			}
		}
	}
	if c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError && exitCode != 0 {
		return strings.TrimSpace(strings.Join(crilog.Lines([]byte(logfile.Tail(logPath, 80, 4096))), "\n"))
	}
	return ""
}

// freshFile creates an empty file at path, 0666 so that any user of the
// container can write it (as the kubelet's termination-log).
func freshFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		return err
	}
	return os.Chmod(path, 0o666)
}
