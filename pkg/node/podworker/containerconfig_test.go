package podworker

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/pkg/node/images"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// pidRun is a target container's run whose PID namespace can be shared.
type pidRun struct{ *fakeRun }

func (pidRun) PIDNamespace() string { return "/proc/42/ns/pid" }

// TestBuildRun is the container configuration, from the pod, the spec
// and what the worker gathered, decision by decision.
func TestBuildRun(t *testing.T) {
	busybox := &pulledImage{Image: images.Image{ID: "sha256:b"}, name: "docker.io/library/busybox:latest", layers: []string{"/store/layers/b"},
		config: &v1.ConfigFile{Config: v1.Config{Entrypoint: []string{"/bin/sh"}, Cmd: []string{"-c", "serve"}, WorkingDir: "/srv", User: "1000"}}}
	rootImage := &pulledImage{Image: images.Image{ID: "sha256:r"}, layers: []string{"/store/layers/r"}, config: &v1.ConfigFile{Config: v1.Config{Cmd: []string{"run"}}}}
	noFiles := func(string) ([]byte, error) { return nil, fs.ErrNotExist }
	existing := func(paths ...string) func(string) (os.FileInfo, error) {
		return func(p string) (os.FileInfo, error) {
			if slices.Contains(paths, p) {
				return os.Stat("/")
			}
			return nil, fs.ErrNotExist
		}
	}
	volumes := []runtime.Mount{{Source: "/pods/p/volumes/data", Destination: "/data"}}
	base := func() runFacts {
		return runFacts{ref: &runtime.ContainerConfig{ID: "uid_c", Dir: "/pods/p/c", Run: 2}, env: []string{"NAME=world"},
			expand: func(s string) string { return strings.ReplaceAll(s, "$(NAME)", "world") },
			image:  busybox, hostname: "p", logPath: "/pods/p/c/2.log",
			hostFiles:     []runtime.Mount{{Source: "/pods/p/etc/hosts", Destination: "/etc/hosts"}},
			node:          nodeFacts{isolated: true, stopPodsOnExit: true, seccompDefault: true, seccompDir: "/seccomp", pidsLimit: 4096, memory: 1 << 30},
			mounts:        func(*corev1.Container) ([]runtime.Mount, error) { return volumes, nil },
			readImageFile: noFiles, stat: existing()}
	}
	pod := func(mutate ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		spec   corev1.Container
		facts  func(*runFacts)
		errHas string
		check  func(*testing.T, *runtime.ContainerConfig)
	}{
		{name: "the image's entrypoint, cmd and working directory", pod: pod(), spec: corev1.Container{Name: "c"},
			check: func(t *testing.T, c *runtime.ContainerConfig) {
				if !slices.Equal(c.Argv, []string{"/bin/sh", "-c", "serve"}) || c.WorkingDir != "/srv" || c.Rootfs == nil || c.Rootfs.Layers[0] != "/store/layers/b" {
					t.Errorf("argv %v, dir %s, rootfs %+v", c.Argv, c.WorkingDir, c.Rootfs)
				}
				if c.User == nil || c.User.UID != 1000 || c.PidsLimit != 4096 || c.Seccomp == nil || !c.Seccomp.RuntimeDefault || !c.DieWithAgent {
					t.Errorf("user %+v, pids %d, seccomp %+v, die with agent %v", c.User, c.PidsLimit, c.Seccomp, c.DieWithAgent)
				}
				if c.ID != "uid_c" || c.Run != 2 || c.LogPath != "/pods/p/c/2.log" || c.Hostname != "p" {
					t.Errorf("ref %s %d %s %s", c.ID, c.Run, c.LogPath, c.Hostname)
				}
			}},
		{name: "the container's command replaces the entrypoint and drops the cmd; $(VAR) expanded", pod: pod(),
			spec: corev1.Container{Name: "c", Command: []string{"echo"}, Args: []string{"hello $(NAME)"}},
			check: func(t *testing.T, c *runtime.ContainerConfig) {
				if !slices.Equal(c.Argv, []string{"echo", "hello world"}) {
					t.Errorf("argv %v", c.Argv)
				}
			}},
		{name: "no command anywhere", pod: pod(), spec: corev1.Container{Name: "c"},
			facts: func(f *runFacts) { f.image = &pulledImage{config: &v1.ConfigFile{}} }, errHas: "no command specified"},
		{name: "host processes: no isolation at all", pod: pod(), spec: corev1.Container{Name: "c", Command: []string{"sleep", "1"}},
			facts: func(f *runFacts) { f.image, f.node.isolated = nil, false },
			check: func(t *testing.T, c *runtime.ContainerConfig) {
				if c.Seccomp != nil || c.Mounts != nil || c.PidsLimit != 0 || c.User != nil {
					t.Errorf("a host process got isolation: %+v", c)
				}
			}},
		{name: "a host root needs its command", pod: pod(), spec: corev1.Container{Name: "c"},
			facts: func(f *runFacts) { f.image = nil }, errHas: "has no command"},
		{name: "runAsNonRoot against an image that runs as root", pod: pod(),
			spec:  corev1.Container{Name: "c", SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}},
			facts: func(f *runFacts) { f.image = rootImage }, errHas: "image will run as root"},
		{name: "a privileged container gets no RuntimeDefault profile", pod: pod(),
			spec: corev1.Container{Name: "c", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}},
			check: func(t *testing.T, c *runtime.ContainerConfig) {
				if !c.Privileged || c.Seccomp == nil {
					t.Errorf("privileged %v, seccomp %+v (RuntimeDefault is the runtime's to skip)", c.Privileged, c.Seccomp)
				}
			}},
		{name: "kubectl debug --target a container that does not run", pod: pod(), spec: corev1.Container{Name: "d"},
			facts: func(f *runFacts) { f.targetName = "c" }, errHas: `target container "c" is not running`},
		{name: "kubectl debug --target: its PID namespace", pod: pod(), spec: corev1.Container{Name: "d"},
			facts: func(f *runFacts) { f.targetName, f.target = "c", pidRun{&fakeRun{Ending: runtime.NewEnding()}} },
			check: func(t *testing.T, c *runtime.ContainerConfig) {
				if c.PIDNamespace != "/proc/42/ns/pid" {
					t.Errorf("PID namespace %q", c.PIDNamespace)
				}
			}},
		{name: "host files first, then volumes, then the termination log, all confined", pod: pod(),
			spec: corev1.Container{Name: "c", TerminationMessagePath: "/../../dev/termination-log"},
			check: func(t *testing.T, c *runtime.ContainerConfig) {
				var dst []string
				for _, m := range c.Mounts {
					dst = append(dst, m.Destination)
				}
				if !slices.Equal(dst, []string{"/etc/hosts", "/data", "/dev/termination-log"}) || c.Mounts[2].Source != "/pods/p/c/termination-log-2" {
					t.Errorf("mounts %+v", c.Mounts)
				}
			}},
		{name: "a subPathExpr of a variable that is not set", pod: pod(),
			spec:   corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", SubPathExpr: "$(POD)"}}},
			errHas: "missing value for POD"},
		{name: "volumes that cannot be mounted", pod: pod(), spec: corev1.Container{Name: "c"},
			facts: func(f *runFacts) {
				f.mounts = func(*corev1.Container) ([]runtime.Mount, error) { return nil, errors.New("no volume data") }
			}, errHas: "no volume data"},
		{name: "a host root's mount point in a read-only system directory the host lacks", pod: pod(),
			spec: corev1.Container{Name: "c", Command: []string{"run"}},
			facts: func(f *runFacts) {
				f.image = nil
				f.mounts = func(*corev1.Container) ([]runtime.Mount, error) {
					return []runtime.Mount{{Source: "/data/file", Destination: "/etc/steadyplane/x"}}, nil
				}
			}, errHas: "inside the read-only /etc of the host"},
		{name: "a host root's mount point the host has", pod: pod(), spec: corev1.Container{Name: "c", Command: []string{"run"}},
			facts: func(f *runFacts) {
				f.image, f.stat = nil, existing("/etc/steadyplane/x")
				f.mounts = func(*corev1.Container) ([]runtime.Mount, error) {
					return []runtime.Mount{{Source: "/data/file", Destination: "/etc/steadyplane/x"}}, nil
				}
			},
			check: func(t *testing.T, c *runtime.ContainerConfig) {
				if c.Rootfs != nil || len(c.Mounts) != 2 {
					t.Errorf("a host root: rootfs %+v, mounts %+v", c.Rootfs, c.Mounts)
				}
			}},
		{name: "sysctls the node does not allow", pod: pod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.panic", Value: "1"}}}
		}), spec: corev1.Container{Name: "c"}, errHas: "kernel.panic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := base()
			if tc.facts != nil {
				tc.facts(&f)
			}
			spec := tc.spec
			cfg, err := buildRun(tc.pod, &spec, f)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %v, want one containing %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, cfg)
		})
	}
}
