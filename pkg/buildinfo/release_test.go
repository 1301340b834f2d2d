package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

func TestParseRelease(t *testing.T) {
	tests := []struct {
		in      string
		want    string // the parsed version's String(), without "v"
		wantErr string
	}{
		{"", "0.0.0-dev", ""},
		{"v0.4.0", "0.4.0", ""},
		{"v0.5.0-rc.1", "0.5.0-rc.1", ""},
		{"v1.2.3", "1.2.3", ""},
		{"0.4.0", "", "not a version like"},
		{"v0.4", "", "not a version like"},
		{"latest", "", "not a version like"},
		{"v0.4.0+abc", "", "has build metadata"},
		{"v0.4.0 ", "", "not a version like"},
	}
	for _, tc := range tests {
		v, err := ParseRelease(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseRelease(%q) = %v, %v; want error with %q", tc.in, v, err, tc.wantErr)
			}
			continue
		}
		if err != nil || v.String() != tc.want {
			t.Errorf("ParseRelease(%q) = %v, %v; want %s", tc.in, v, err, tc.want)
		}
	}
}

func TestDevReleaseOrdersFirst(t *testing.T) {
	dev := utilversion.MustParseSemantic(DevRelease)
	for _, r := range []string{"v0.0.1", "v0.1.0-rc.1", "v0.1.0"} {
		if !dev.LessThan(utilversion.MustParseSemantic(r)) {
			t.Errorf("%s does not order before %s", DevRelease, r)
		}
	}
}

func TestDescribe(t *testing.T) {
	read := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{
			Deps:     []*debug.Module{{Path: "k8s.io/kubernetes", Version: "v1.36.3"}},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}},
		}, true
	}
	got := describe("v0.4.0", read)
	if got.Release != "v0.4.0" || got.Commit != "abc123-dirty" || got.Kubernetes != "v1.36.3" || got.GitVersion != "v1.36.3+steadyplane-v0.4.0" {
		t.Errorf("describe = %+v", got)
	}
	bare := describe(DevRelease, func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{}, true })
	if bare.Commit != "unknown" || bare.Kubernetes != "" || bare.GitVersion != "" {
		t.Errorf("describe of a build with no records = %+v", bare)
	}
}

func TestGitVersionParsesAsKubernetesVersion(t *testing.T) {
	// Upstream parses the kubelet version and gitVersion; the release in
	// build metadata must not break that.
	for _, r := range []string{"v0.4.0", DevRelease, "v0.5.0-rc.1"} {
		gv := "v1.36.3+steadyplane-" + r
		v, err := utilversion.ParseSemantic(gv)
		if err != nil || v.Major() != 1 || v.Minor() != 36 || v.Patch() != 3 {
			t.Errorf("ParseSemantic(%q) = %v, %v", gv, v, err)
		}
	}
}
