package podworker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/securitycontext"

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

// securityConfig applies the container's effective security context (the
// pod's, overridden by the container's) to cfg. image is the container's
// image, nil for a host root, whose files readImageFile reads: without
// runAsUser the container runs as the image's user, and runAsNonRoot is
// checked against it as the kubelet does.
func securityConfig(pod *corev1.Pod, c *corev1.Container, cfg *runtime.ContainerConfig, image *pulledImage, readImageFile func(string) ([]byte, error)) error {
	sc := securitycontext.DetermineEffectiveSecurityContext(pod, c)
	var imgUser runtime.User
	numeric := true
	if image != nil {
		var err error
		imgUser, numeric, err = imageUser(image.config.Config.User, readImageFile)
		if err != nil {
			return fmt.Errorf("%w: %v", errConfig, err)
		}
		if imgUser.UID != 0 || imgUser.GID != 0 {
			cfg.User = &imgUser
		}
	}
	if sc == nil {
		return nil
	}
	uid := int64(imgUser.UID)
	if sc.RunAsUser != nil {
		uid = *sc.RunAsUser
	}
	if sc.RunAsNonRoot != nil && *sc.RunAsNonRoot {
		switch {
		case sc.RunAsUser == nil && !numeric:
			return fmt.Errorf("%w: container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root", errConfig, image.config.Config.User)
		case uid == 0 && image == nil:
			return fmt.Errorf("%w: container has runAsNonRoot and will run as root (set a non-zero runAsUser)", errConfig)
		case uid == 0:
			return fmt.Errorf("%w: container has runAsNonRoot and image will run as root", errConfig)
		}
	}
	if sc.RunAsUser != nil || sc.RunAsGroup != nil {
		u := &runtime.User{UID: uint32(uid), GID: uint32(uid)}
		if sc.RunAsUser == nil {
			u.GID = imgUser.GID
		}
		if sc.RunAsGroup != nil {
			u.GID = uint32(*sc.RunAsGroup)
		}
		cfg.User = u
	}
	if psc := pod.Spec.SecurityContext; psc != nil && cfg.User != nil {
		for _, g := range psc.SupplementalGroups {
			cfg.User.AdditionalGIDs = append(cfg.User.AdditionalGIDs, uint32(g))
		}
		if psc.FSGroup != nil {
			cfg.User.AdditionalGIDs = append(cfg.User.AdditionalGIDs, uint32(*psc.FSGroup))
		}
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

// checkForRuntime checks a container that runs host commands (the process
// runtime, or the host runtime class): it names its command, and a host
// process asks for no isolation it cannot have.
func checkForRuntime(pod *corev1.Pod, c *corev1.Container, isolated bool) error {
	if len(c.Command) == 0 {
		if isolated {
			return fmt.Errorf("%w: container %s has no command; pods of runtime class %s run commands from the host's system directories, not from their image", errConfig, c.Name, runtime.HostRuntimeClass)
		}
		return fmt.Errorf("%w: container %s has no command; with --runtime=process the node agent runs host commands and does not use images", errConfig, c.Name)
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
// stat is os.Stat on the host.
func checkMountPoint(m runtime.Mount, stat func(string) (os.FileInfo, error)) error {
	// runc binds these read-only into every container: a mount point in
	// them must exist on the host, or be one runc makes.
	for _, dir := range runc.SystemDirs {
		if !strings.HasPrefix(m.Destination, dir+"/") {
			continue
		}
		if _, err := stat(m.Destination); err == nil {
			return nil
		}
		if st, err := stat(m.Source); err == nil && st.IsDir() {
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
