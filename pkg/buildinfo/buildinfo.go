// Package buildinfo tells which Kubernetes release the binary was built from.
//
// Upstream sets k8s.io/component-base/version's variables with -ldflags -X in
// its release scripts; a plain "go build" or "go run" leaves the placeholder
// "v0.0.0-master+$Format:%H$", which the API server would serve on /version and
// which kubectl cannot parse. The version of the k8s.io/kubernetes module
// recorded in the binary tells the truth without any build flags.
package buildinfo

import (
	"runtime/debug"
	"strings"

	"k8s.io/component-base/version"
)

// Suffix marks the build as steadyplane's, in semver build metadata, which
// orders equal to the upstream release it was built from.
const Suffix = "+steadyplane"

// placeholderPrefix is what component-base's gitVersion holds when no
// -ldflags set it.
const placeholderPrefix = "v0.0.0-master"

// KubernetesGitVersion returns the version to report as gitVersion: the one
// set by -ldflags if any, else the k8s.io/kubernetes module's version with
// Suffix, else "" when neither is known.
func KubernetesGitVersion() string {
	return gitVersion(version.Get().GitVersion, debug.ReadBuildInfo)
}

func gitVersion(fromLdflags string, read func() (*debug.BuildInfo, bool)) string {
	if fromLdflags != "" && !strings.HasPrefix(fromLdflags, placeholderPrefix) {
		return fromLdflags
	}
	if info, ok := read(); ok {
		if v, ok := FromModule(info); ok {
			return v
		}
	}
	return ""
}

// FromModule derives gitVersion from the version of k8s.io/kubernetes in info:
// "v1.36.3" gives "v1.36.3+steadyplane".
func FromModule(info *debug.BuildInfo) (string, bool) {
	for _, dep := range info.Deps {
		if dep.Path != "k8s.io/kubernetes" {
			continue
		}
		v := dep.Version
		if dep.Replace != nil {
			v = dep.Replace.Version
		}
		parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
		if !strings.HasPrefix(v, "v") || len(parts) < 3 || parts[0] == "" || parts[1] == "" {
			return "", false
		}
		return v + Suffix, true
	}
	return "", false
}
