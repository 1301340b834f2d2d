package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromModule(t *testing.T) {
	tests := []struct {
		name   string
		deps   []*debug.Module
		want   string
		wantOK bool
	}{
		{"release", []*debug.Module{{Path: "k8s.io/api", Version: "v0.36.3"}, {Path: "k8s.io/kubernetes", Version: "v1.36.3"}}, "v1.36.3+steadyplane", true},
		{"replaced", []*debug.Module{{Path: "k8s.io/kubernetes", Version: "v1.36.0", Replace: &debug.Module{Version: "v1.36.9"}}}, "v1.36.9+steadyplane", true},
		{"absent", []*debug.Module{{Path: "k8s.io/api", Version: "v0.36.3"}}, "", false},
		{"devel", []*debug.Module{{Path: "k8s.io/kubernetes", Version: "(devel)"}}, "", false},
	}
	for _, tc := range tests {
		got, ok := FromModule(&debug.BuildInfo{Deps: tc.deps})
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
		read    func() (*debug.BuildInfo, bool)
		want    string
	}{
		{"v0.0.0-master+$Format:%H$", withK8s, "v1.36.3+steadyplane"},
		{"", withK8s, "v1.36.3+steadyplane"},
		{"v1.36.3-custom", withK8s, "v1.36.3-custom"}, // -ldflags win
		{"v0.0.0-master+$Format:%H$", none, ""},
	}
	for _, tc := range tests {
		if got := gitVersion(tc.ldflags, tc.read); got != tc.want {
			t.Errorf("gitVersion(%q) = %q, want %q", tc.ldflags, got, tc.want)
		}
	}
}
