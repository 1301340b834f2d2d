package podworker

import (
	"errors"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// TestSeccompProfile: the kubelet's precedence (container, pod, node
// default) and Localhost profiles confined to the node's profile directory.
func TestSeccompProfile(t *testing.T) {
	profile := func(typ corev1.SeccompProfileType, local string) *corev1.SeccompProfile {
		p := &corev1.SeccompProfile{Type: typ}
		if local != "" {
			p.LocalhostProfile = ptr.To(local)
		}
		return p
	}
	runtimeDefault := &runtime.Seccomp{RuntimeDefault: true}
	tests := []struct {
		name        string
		pod, ctr    *corev1.SeccompProfile
		nodeDefault bool
		want        *runtime.Seccomp
		wantErr     bool
	}{
		{"nothing named, no node default: unconfined", nil, nil, false, nil, false},
		{"nothing named, --seccomp-default: RuntimeDefault", nil, nil, true, runtimeDefault, false},
		{"the pod's RuntimeDefault", profile(corev1.SeccompProfileTypeRuntimeDefault, ""), nil, false, runtimeDefault, false},
		{"the container's Unconfined over the pod's and the node's", profile(corev1.SeccompProfileTypeRuntimeDefault, ""), profile(corev1.SeccompProfileTypeUnconfined, ""), true, nil, false},
		{"a Localhost profile under the node's directory", nil, profile(corev1.SeccompProfileTypeLocalhost, "team/audit.json"), true, &runtime.Seccomp{LocalhostProfile: "/node/seccomp/team/audit.json"}, false},
		{"a Localhost profile out of the directory is refused", nil, profile(corev1.SeccompProfileTypeLocalhost, "../../etc/passwd"), false, nil, true},
		{"an absolute Localhost profile is refused", nil, profile(corev1.SeccompProfileTypeLocalhost, "/etc/passwd"), false, nil, true},
		{"Localhost without a profile is refused", nil, profile(corev1.SeccompProfileTypeLocalhost, ""), false, nil, true},
	}
	for _, tc := range tests {
		pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{SeccompProfile: tc.pod}}}
		c := &corev1.Container{SecurityContext: &corev1.SecurityContext{SeccompProfile: tc.ctr}}
		got, err := seccompProfile(pod, c, tc.nodeDefault, "/node/seccomp")
		if (err != nil) != tc.wantErr || err != nil && !errors.Is(err, errConfig) {
			t.Errorf("%s: error %v, want error %v (a configuration error)", tc.name, err, tc.wantErr)
			continue
		}
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestCheckUnsupported: what the node cannot honour is refused with a
// reason, never dropped.
func TestCheckUnsupported(t *testing.T) {
	apparmor := func(typ corev1.AppArmorProfileType) *corev1.SecurityContext {
		return &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: typ}}
	}
	tests := []struct {
		name     string
		pod      corev1.PodSpec
		ctr      *corev1.SecurityContext
		appArmor bool
		refused  bool
	}{
		{"nothing asked", corev1.PodSpec{}, nil, false, false},
		{"AppArmor Unconfined", corev1.PodSpec{}, apparmor(corev1.AppArmorProfileTypeUnconfined), false, false},
		{"AppArmor RuntimeDefault without AppArmor in the kernel", corev1.PodSpec{}, apparmor(corev1.AppArmorProfileTypeRuntimeDefault), false, true},
		{"AppArmor RuntimeDefault with AppArmor in the kernel", corev1.PodSpec{}, apparmor(corev1.AppArmorProfileTypeRuntimeDefault), true, true},
		{"the pod's AppArmor Localhost", corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost}}}, nil, true, true},
		{"procMount Unmasked", corev1.PodSpec{}, &corev1.SecurityContext{ProcMount: ptr.To(corev1.UnmaskedProcMount)}, false, true},
		{"procMount Default", corev1.PodSpec{}, &corev1.SecurityContext{ProcMount: ptr.To(corev1.DefaultProcMount)}, false, false},
		{"hostUsers false", corev1.PodSpec{HostUsers: ptr.To(false)}, nil, false, true},
	}
	for _, tc := range tests {
		err := checkUnsupported(&corev1.Pod{Spec: tc.pod}, &corev1.Container{SecurityContext: tc.ctr}, tc.appArmor)
		if (err != nil) != tc.refused || err != nil && !errors.Is(err, errConfig) {
			t.Errorf("%s: %v, want refused %v", tc.name, err, tc.refused)
		}
	}
}

func TestPodSysctls(t *testing.T) {
	pod := func(hostNet bool, s ...corev1.Sysctl) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: hostNet, SecurityContext: &corev1.PodSecurityContext{Sysctls: s}}}
	}
	got, err := podSysctls(pod(false, corev1.Sysctl{Name: "net/ipv4/ip_local_port_range", Value: "1024 65535"}, corev1.Sysctl{Name: "kernel.shm_rmid_forced", Value: "1"}))
	if err != nil || !maps.Equal(got, map[string]string{"net.ipv4.ip_local_port_range": "1024 65535", "kernel.shm_rmid_forced": "1"}) {
		t.Errorf("safe sysctls: %v, %v", got, err)
	}
	if _, err := podSysctls(pod(false, corev1.Sysctl{Name: "kernel.msgmax", Value: "1"})); !errors.Is(err, errConfig) {
		t.Errorf("an unsafe sysctl: %v, want refused", err)
	}
	if _, err := podSysctls(pod(true, corev1.Sysctl{Name: "net.ipv4.tcp_syncookies", Value: "1"})); !errors.Is(err, errConfig) {
		t.Errorf("a network sysctl on the host's network: %v, want refused", err)
	}
}

// TestPodHostname: the kubelet's host name, cut to what sethostname takes
// (the conformance suite's pods with names over 63 characters).
func TestPodHostname(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b" + strings.Repeat("c", 10)
	tests := []struct {
		name, hostname, want string
	}{
		{"web-0", "", "web-0"},
		{"web-0", "custom", "custom"},
		{strings.Repeat("x", 70), "", strings.Repeat("x", 63)},
		{long, "", strings.Repeat("a", 62)}, // cut at the "-": trimmed
		{strings.Repeat("y", 62) + ".zzz", "", strings.Repeat("y", 62)},
	}
	for _, tc := range tests {
		names, err := namesOf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: corev1.PodSpec{Hostname: tc.hostname}}, "cluster.local")
		if got := names.kernel; err != nil || got != tc.want || names.hostname != tc.want {
			t.Errorf("namesOf(%q, %q) = %+v, %v; want %q", tc.name, tc.hostname, names, err, tc.want)
		}
	}
}

// TestConfineMounts: the finding, a mountPath or
// terminationMessagePath with ".." made the agent create files outside the
// container's root; every destination is now inside it.
func TestConfineMounts(t *testing.T) {
	mounts := []runtime.Mount{{Destination: "/../../etc/nologin"}, {Destination: "data/../../x"}, {Destination: "/dev/termination-log"}}
	confineMounts(mounts)
	for i, want := range []string{"/etc/nologin", "/x", "/dev/termination-log"} {
		if mounts[i].Destination != want {
			t.Errorf("mount %d: %q, want %q", i, mounts[i].Destination, want)
		}
	}
}
