package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestKubernetesVersion(t *testing.T) {
	tests := []struct {
		name   string
		deps   []*debug.Module
		want   string
		wantOK bool
	}{
		{"release", []*debug.Module{{Path: "k8s.io/api", Version: "v0.36.3"}, {Path: "k8s.io/kubernetes", Version: "v1.36.3"}}, "v1.36.3", true},
		{"replaced", []*debug.Module{{Path: "k8s.io/kubernetes", Version: "v1.36.0", Replace: &debug.Module{Version: "v1.36.9"}}}, "v1.36.9", true},
		{"absent", []*debug.Module{{Path: "k8s.io/api", Version: "v0.36.3"}}, "", false},
		{"devel", []*debug.Module{{Path: "k8s.io/kubernetes", Version: "(devel)"}}, "", false},
	}
	for _, tc := range tests {
		got, ok := KubernetesVersion(&debug.BuildInfo{Deps: tc.deps})
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: got %q %v, want %q %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestGitVersion(t *testing.T) {
	withK8s := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Deps: []*debug.Module{{Path: "k8s.io/kubernetes", Version: "v1.36.3"}}}, true
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	tests := []struct {
		ldflags string
		release string
		read    func() (*debug.BuildInfo, bool)
		want    string
	}{
		{"v0.0.0-master+$Format:%H$", "v0.4.0", withK8s, "v1.36.3+steadyplane-v0.4.0"},
		{"", DevRelease, withK8s, "v1.36.3+steadyplane-v0.0.0-dev"},
		{"", "v0.5.0-rc.1", withK8s, "v1.36.3+steadyplane-v0.5.0-rc.1"},
		{"v1.36.3-custom", "v0.4.0", withK8s, "v1.36.3-custom"}, // -ldflags win
		{"v0.0.0-master+$Format:%H$", "v0.4.0", none, ""},
	}
	for _, tc := range tests {
		if got := gitVersion(tc.ldflags, tc.release, tc.read); got != tc.want {
			t.Errorf("gitVersion(%q, %q) = %q, want %q", tc.ldflags, tc.release, got, tc.want)
		}
	}
}
