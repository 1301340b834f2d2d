package podworker

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// TestPullNeeded: the kubelet's image pull policies.
func TestPullNeeded(t *testing.T) {
	tests := []struct {
		policy  corev1.PullPolicy
		present bool
		pull    bool
		err     error
	}{
		{corev1.PullAlways, true, true, nil},
		{corev1.PullAlways, false, true, nil},
		{corev1.PullIfNotPresent, true, false, nil},
		{corev1.PullIfNotPresent, false, true, nil},
		{"", false, true, nil},
		{corev1.PullNever, true, false, nil},
		{corev1.PullNever, false, false, errNeverPull},
	}
	for _, tc := range tests {
		pull, err := pullNeeded(tc.policy, tc.present)
		if pull != tc.pull || !errors.Is(err, tc.err) {
			t.Errorf("pullNeeded(%q, present %v) = %v, %v; want %v, %v", tc.policy, tc.present, pull, err, tc.pull, tc.err)
		}
	}
}

// TestImageArgv: how Kubernetes combines a container's command and args
// with its image's Entrypoint and Cmd (the table of the "Define a command"
// task page), with $(VAR) expanded only in the container's own.
func TestImageArgv(t *testing.T) {
	image := v1.Config{Entrypoint: []string{"/ep", "$(X)"}, Cmd: []string{"cmd-arg"}}
	expand := func(s string) string { return strings.ReplaceAll(s, "$(X)", "x") }
	tests := []struct {
		name          string
		command, args []string
		image         v1.Config
		want          []string
	}{
		{"neither: the image's entrypoint and cmd", nil, nil, image, []string{"/ep", "$(X)", "cmd-arg"}},
		{"command only: the image's are ignored", []string{"/c"}, nil, image, []string{"/c"}},
		{"args only: the image's entrypoint with them", nil, []string{"a"}, image, []string{"/ep", "$(X)", "a"}},
		{"both: the container's", []string{"/c"}, []string{"a"}, image, []string{"/c", "a"}},
		{"the container's $(X) is expanded", []string{"/c", "$(X)"}, []string{"$(X)"}, image, []string{"/c", "x", "x"}},
		{"an image with only a cmd", nil, nil, v1.Config{Cmd: []string{"sh"}}, []string{"sh"}},
		{"no command anywhere", nil, nil, v1.Config{}, []string{}},
	}
	for _, tc := range tests {
		got := imageArgv(&corev1.Container{Command: tc.command, Args: tc.args}, tc.image, expand)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestImageUser(t *testing.T) {
	files := map[string]string{
		"/etc/passwd": "root:x:0:0::/root:/bin/sh\nweb:x:1000:1001::/home/web:/bin/sh\nbroken:x:abc:1::/:/bin/sh\n",
		"/etc/group":  "root:x:0:\nstaff:x:50:\n",
	}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	tests := []struct {
		user    string
		want    runtime.User
		numeric bool
		err     bool
	}{
		{"", runtime.User{}, true, false},
		{"0", runtime.User{}, true, false},
		{"1000", runtime.User{UID: 1000, GID: 1001}, true, false},
		{"4242", runtime.User{UID: 4242}, true, false},
		{"1000:50", runtime.User{UID: 1000, GID: 50}, true, false},
		{"web", runtime.User{UID: 1000, GID: 1001}, false, false},
		{"web:staff", runtime.User{UID: 1000, GID: 50}, false, false},
		{"nobody", runtime.User{}, false, true},
		{"web:nogroup", runtime.User{UID: 1000, GID: 1001}, false, true},
		{"broken", runtime.User{}, false, true},
	}
	for _, tc := range tests {
		got, numeric, err := imageUser(tc.user, read)
		if (err != nil) != tc.err || (!tc.err && (got.UID != tc.want.UID || got.GID != tc.want.GID || numeric != tc.numeric)) {
			t.Errorf("imageUser(%q) = %+v, numeric %v, %v; want %+v, numeric %v, error %v", tc.user, got, numeric, err, tc.want, tc.numeric, tc.err)
		}
	}
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"PATH=/image", "LANG=C", "A=1"}, []string{"A=2", "PATH=/mine", "B=3"})
	want := []string{"PATH=/mine", "LANG=C", "A=2", "B=3"}
	if !slices.Equal(got, want) {
		t.Errorf("mergeEnv = %q, want %q", got, want)
	}
}

// TestContainerEnvOverImage: the image's environment comes first, the
// container's replaces it; PATH defaults only when the image sets none; the
// image's variables are not expanded into the container's.
func TestContainerEnvOverImage(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	c := &corev1.Container{Env: []corev1.EnvVar{{Name: "LANG", Value: "de"}, {Name: "X", Value: "$(LANG)-$(HOME)"}}}
	env, expand, err := containerEnv(context.Background(), pod, c, envInputs{podIPs: []string{"10.0.0.2"}, hostIP: "10.0.0.1", base: []string{"PATH=/image/bin", "HOME=/root", "LANG=C"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=/image/bin", "HOME=/root", "LANG=de", "HOSTNAME=p", "X=de-$(HOME)"}
	if !slices.Equal(env, want) {
		t.Errorf("env = %q, want %q", env, want)
	}
	if got := expand("$(X) $$(X) $(NONE)"); got != "de-$(HOME) $(X) $(NONE)" {
		t.Errorf("expand = %q", got)
	}
	env, _, _ = containerEnv(context.Background(), pod, &corev1.Container{}, envInputs{})
	if env[0] != defaultPath {
		t.Errorf("without an image PATH: %q, want the default first", env)
	}
}

// TestRunAsNonRootWithImage: runAsNonRoot is checked against the image's
// user when the pod names none, as the kubelet does.
func TestRunAsNonRootWithImage(t *testing.T) {
	img := func(user string) *pulledImage {
		return &pulledImage{config: &v1.ConfigFile{Config: v1.Config{User: user}}}
	}
	tests := []struct {
		name      string
		image     *pulledImage
		runAsUser *int64
		wantErr   string
		wantUID   uint32
	}{
		{"image user 1000", img("1000"), nil, "", 1000},
		{"image runs as root", img(""), nil, "image will run as root", 0},
		{"image user is a name", img("web"), nil, "non-numeric user (web)", 0},
		{"runAsUser overrides the image's root", img(""), ptr.To[int64](2000), "", 2000},
		{"runAsUser 0 is refused", img("1000"), ptr.To[int64](0), "will run as root", 0},
		{"a host root without runAsUser", nil, nil, "set a non-zero runAsUser", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: tc.runAsUser}}}
			c := &corev1.Container{Name: "c"}
			var cfg runtime.ContainerConfig
			if tc.image != nil {
				// A user's name is looked up in the image's /etc/passwd.
				layer := t.TempDir()
				if err := os.MkdirAll(layer+"/etc", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(layer+"/etc/passwd", []byte("web:x:1000:1000::/:/bin/sh\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				tc.image.layers = []string{layer}
			}
			err := securityConfig(pod, c, &cfg, tc.image, imageFiles(tc.image))
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errConfig) {
					t.Fatalf("err = %v, want a configuration error with %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case cfg.User == nil || cfg.User.UID != tc.wantUID:
				t.Errorf("user %+v, want uid %d", cfg.User, tc.wantUID)
			}
		})
	}
}

// TestPruneRunLogs: starting run 5 keeps the logs of runs 4 and 5 (kubectl
// logs and logs --previous), rotated ones included, and nothing else of the
// container's directory.
func TestPruneRunLogs(t *testing.T) {
	dir := t.TempDir()
	c := dir + "/c"
	files := []string{"0.log", "3.log", "3.log.20261124-000000.000000000", "4.log", "4.log.20261124-000001.000000000", "5.log",
		"termination-log-3", "termination-log-4", "exit.json", "bundle"}
	if err := os.MkdirAll(c, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(c+"/"+f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pruneRunLogs(dir, "c", 5)
	entries, _ := os.ReadDir(c)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{"4.log", "4.log.20261124-000001.000000000", "5.log", "bundle", "exit.json", "termination-log-4"}
	if !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
}
