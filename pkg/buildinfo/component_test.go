package buildinfo

import (
	"strings"
	"testing"

	"k8s.io/component-base/version"

	"github.com/steadyplane/steadyplane/internal/testci"
)

func TestStamp(t *testing.T) {
	for _, tc := range []struct {
		name string
		info Info
		want componentStamp
	}{
		{"release build", Info{GitVersion: "v1.36.3+steadyplane-v0.5.0", Commit: "0123abc"},
			componentStamp{"v1.36.3+steadyplane-v0.5.0", "1", "36", "0123abc", "clean"}},
		{"changed tree", Info{GitVersion: "v1.36.3+steadyplane-v0.0.0-dev", Commit: "0123abc-dirty"},
			componentStamp{"v1.36.3+steadyplane-v0.0.0-dev", "1", "36", "0123abc", "dirty"}},
		{"no VCS information (go test)", Info{GitVersion: "v1.36.3+steadyplane-v0.0.0-dev", Commit: "unknown"},
			componentStamp{gitVersion: "v1.36.3+steadyplane-v0.0.0-dev", major: "1", minor: "36"}},
		{"no Kubernetes version", Info{Commit: "0123abc"}, componentStamp{}},
		{"the placeholder", Info{GitVersion: placeholderPrefix + "+$Format:%H$"}, componentStamp{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stamp(tc.info); got != tc.want {
				t.Errorf("stamp(%+v) = %+v, want %+v", tc.info, got, tc.want)
			}
		})
	}
}

// The test binary is built without -ldflags, as go install builds
// steadyplane: component-base holds its placeholders until stamped.
func TestStampComponentVersion(t *testing.T) {
	before := version.Get()
	saved := []string{componentGitVersion, componentGitMajor, componentGitMinor, componentGitCommit, componentGitTreeState}
	t.Cleanup(func() {
		componentGitVersion, componentGitMajor, componentGitMinor, componentGitCommit, componentGitTreeState = saved[0], saved[1], saved[2], saved[3], saved[4]
		_ = version.SetDynamicVersion(saved[0])
	})
	if !strings.HasPrefix(before.GitVersion, placeholderPrefix) {
		testci.CannotRun(t, "this test binary was built with a version (%s): nothing to stamp", before.GitVersion)
	}
	stampComponentVersion(Info{GitVersion: "v1.36.3+steadyplane-v0.5.0", Commit: "0123abc"})
	got := version.Get()
	if got.GitVersion != "v1.36.3+steadyplane-v0.5.0" || got.Major != "1" || got.Minor != "36" || got.GitCommit != "0123abc" || got.GitTreeState != "clean" {
		t.Errorf("after the stamp version.Get() = %+v", got)
	}
	// A version already set (by -ldflags, or an earlier stamp) stays.
	stampComponentVersion(Info{GitVersion: "v1.37.0+steadyplane-v0.6.0", Commit: "4567def"})
	if again := version.Get(); again != got {
		t.Errorf("a second stamp changed the version: %+v, then %+v", got, again)
	}
}
