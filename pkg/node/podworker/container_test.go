package podworker

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

func TestCheckForRuntime(t *testing.T) {
	automount := corev1.Volume{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}
	config := corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}
	uid := int64(1000)
	for _, tt := range []struct {
		name     string
		volumes  []corev1.Volume
		sc       *corev1.SecurityContext
		command  []string
		isolated bool
		refused  bool
	}{
		{name: "no command", isolated: true, refused: true},
		{name: "runc: volumes", command: []string{"sleep"}, volumes: []corev1.Volume{config, automount}, isolated: true},
		{name: "process: the service-account token volume is left unmounted", command: []string{"sleep"}, volumes: []corev1.Volume{automount}},
		{name: "process: any other volume is refused", command: []string{"sleep"}, volumes: []corev1.Volume{automount, config}, refused: true},
		{name: "process: a projected volume of the user's is refused", command: []string{"sleep"}, volumes: []corev1.Volume{{Name: "mine", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}}, refused: true},
		{name: "process: runAsUser is refused", command: []string{"sleep"}, sc: &corev1.SecurityContext{RunAsUser: &uid}, refused: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := corev1.Container{Name: "c", Command: tt.command, SecurityContext: tt.sc}
			pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: tt.volumes, Containers: []corev1.Container{c}}}
			err := checkForRuntime(pod, &c, tt.isolated)
			if (err != nil) != tt.refused || err != nil && !errors.Is(err, errConfig) {
				t.Errorf("checkForRuntime = %v, refused want %v (as a config error)", err, tt.refused)
			}
		})
	}
}

func TestCheckMountPoint(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		m       runtime.Mount
		refused bool
	}{
		{name: "outside system directories", m: runtime.Mount{Source: file, Destination: "/data/x"}},
		{name: "existing mount point in /etc", m: runtime.Mount{Source: file, Destination: "/etc/hostname"}},
		{name: "missing mount point in /etc, directory source: runc makes it", m: runtime.Mount{Source: dir, Destination: "/etc/steadyplane-test-does-not-exist"}},
		{name: "missing mount point in /etc, file source", m: runtime.Mount{Source: file, Destination: "/etc/steadyplane-test-does-not-exist"}, refused: true},
		{name: "missing mount point in /usr, missing source", m: runtime.Mount{Source: filepath.Join(dir, "gone"), Destination: "/usr/steadyplane-test-does-not-exist"}, refused: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkMountPoint(tt.m, os.Stat)
			if (err != nil) != tt.refused || err != nil && !errors.Is(err, errConfig) {
				t.Errorf("checkMountPoint = %v, refused want %v (as a config error)", err, tt.refused)
			}
		})
	}
}
