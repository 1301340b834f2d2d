package podworker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// seccompProfile decides a container's seccomp profile as the kubelet does:
// the container's securityContext.seccompProfile, else the pod's, else the
// node's default (RuntimeDefault with --seccomp-default, as the kubelet's
// flag, Unconfined without). A Localhost profile names a file under
// profileRoot and may not leave it. nil is Unconfined.
func seccompProfile(pod *corev1.Pod, c *corev1.Container, nodeDefault bool, profileRoot string) (*runtime.Seccomp, error) {
	var p *corev1.SeccompProfile
	if c.SecurityContext != nil && c.SecurityContext.SeccompProfile != nil {
		p = c.SecurityContext.SeccompProfile
	} else if pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.SeccompProfile != nil {
		p = pod.Spec.SecurityContext.SeccompProfile
	}
	if p == nil {
		if nodeDefault {
			return &runtime.Seccomp{RuntimeDefault: true}, nil
		}
		return nil, nil
	}
	switch p.Type {
	case corev1.SeccompProfileTypeUnconfined:
		return nil, nil
	case corev1.SeccompProfileTypeRuntimeDefault:
		return &runtime.Seccomp{RuntimeDefault: true}, nil
	case corev1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return nil, fmt.Errorf("%w: seccomp profile type Localhost needs localhostProfile", errConfig)
		}
		rel := *p.LocalhostProfile
		if filepath.IsAbs(rel) || strings.HasPrefix(filepath.Clean(rel), "..") {
			return nil, fmt.Errorf("%w: seccomp localhostProfile %q must be a path relative to the node's profile directory %s", errConfig, rel, profileRoot)
		}
		return &runtime.Seccomp{LocalhostProfile: filepath.Join(profileRoot, filepath.Clean(rel))}, nil
	}
	return nil, fmt.Errorf("%w: seccomp profile type %q is not known", errConfig, p.Type)
}

// appArmorEnabled tells whether the kernel enforces AppArmor.
func appArmorEnabled() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && strings.TrimSpace(string(b)) == "Y"
}

// checkUnsupported refuses what a container asks for that this node cannot
// honour, instead of dropping it silently: an AppArmor profile other than
// Unconfined (the node has no AppArmor profiles to load; the kubelet too
// refuses one where the kernel lacks AppArmor), an unmasked /proc, and a
// pod without host users (user namespaces are not set up here).
func checkUnsupported(pod *corev1.Pod, c *corev1.Container, appArmor bool) error {
	var profiles []*corev1.AppArmorProfile
	if pod.Spec.SecurityContext != nil {
		profiles = append(profiles, pod.Spec.SecurityContext.AppArmorProfile)
	}
	if c.SecurityContext != nil {
		profiles = append(profiles, c.SecurityContext.AppArmorProfile)
	}
	for _, p := range profiles {
		if p == nil || p.Type == corev1.AppArmorProfileTypeUnconfined {
			continue
		}
		if !appArmor {
			return fmt.Errorf("%w: AppArmor profile %s cannot be enforced: AppArmor is not enabled on the host", errConfig, p.Type)
		}
		return fmt.Errorf("%w: AppArmor profile %s cannot be enforced: the steadyplane node agent loads no AppArmor profiles; use Unconfined", errConfig, p.Type)
	}
	if c.SecurityContext != nil && c.SecurityContext.ProcMount != nil && *c.SecurityContext.ProcMount == corev1.UnmaskedProcMount {
		return fmt.Errorf("%w: procMount Unmasked is not supported by the steadyplane node agent", errConfig)
	}
	if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
		return fmt.Errorf("%w: hostUsers: false (user namespaces) is not supported by the steadyplane node agent", errConfig)
	}
	return nil
}

// safeSysctls are the sysctls the kubelet allows without
// --allowed-unsafe-sysctls: namespaced, and isolated from other pods (the
// kubelet's safe_sysctls.go for a current kernel).
var safeSysctls = map[string]bool{
	"kernel.shm_rmid_forced":              true,
	"net.ipv4.ip_local_port_range":        true,
	"net.ipv4.tcp_syncookies":             true,
	"net.ipv4.ping_group_range":           true,
	"net.ipv4.ip_unprivileged_port_start": true,
	"net.ipv4.ip_local_reserved_ports":    true,
	"net.ipv4.tcp_keepalive_time":         true,
	"net.ipv4.tcp_fin_timeout":            true,
	"net.ipv4.tcp_keepalive_intvl":        true,
	"net.ipv4.tcp_keepalive_probes":       true,
	"net.ipv4.tcp_rmem":                   true,
	"net.ipv4.tcp_wmem":                   true,
}

// podSysctls returns the pod's sysctls (dots or slashes, as the API allows)
// once each is one the node allows, or why not: as the kubelet, unsafe
// sysctls are refused, and network ones need the pod's own network.
func podSysctls(pod *corev1.Pod) (map[string]string, error) {
	if pod.Spec.SecurityContext == nil || len(pod.Spec.SecurityContext.Sysctls) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, s := range pod.Spec.SecurityContext.Sysctls {
		name := strings.ReplaceAll(s.Name, "/", ".")
		if !safeSysctls[name] {
			return nil, fmt.Errorf("%w: forbidden sysctl %q: not one of the safe sysctls this node allows", errConfig, s.Name)
		}
		if strings.HasPrefix(name, "net.") && pod.Spec.HostNetwork {
			return nil, fmt.Errorf("%w: sysctl %q not allowed with host net enabled", errConfig, s.Name)
		}
		out[name] = s.Value
	}
	return out, nil
}
