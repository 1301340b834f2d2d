// Package buildinfo tells which release of steadyplane the binary is
// (Release, set by -ldflags) and which Kubernetes release it was built from.
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
// orders equal to the upstream release it was built from. The release
// follows it: "+steadyplane-v0.4.0".
const Suffix = "+steadyplane"

// placeholderPrefix is what component-base's gitVersion holds when no
// -ldflags set it.
const placeholderPrefix = "v0.0.0-master"

// KubernetesGitVersion returns the version to report as gitVersion: the one
// set by -ldflags if any, else the k8s.io/kubernetes module's version with
// Suffix and the release ("v1.36.3+steadyplane-v0.4.0", as k3s reports
// "v1.36.3+k3s1"), else "" when neither is known.
func KubernetesGitVersion() string {
	return gitVersion(version.Get().GitVersion, releaseOrDev(Release), debug.ReadBuildInfo)
}

func gitVersion(fromLdflags, release string, read func() (*debug.BuildInfo, bool)) string {
	if fromLdflags != "" && !strings.HasPrefix(fromLdflags, placeholderPrefix) {
		return fromLdflags
	}
	if info, ok := read(); ok {
		if v, ok := KubernetesVersion(info); ok {
			return v + Suffix + "-" + release
		}
	}
	return ""
}

// KubernetesVersion is the version of k8s.io/kubernetes in info ("v1.36.3"),
// the module steadyplane's components come from.
func KubernetesVersion(info *debug.BuildInfo) (string, bool) {
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
		return v, true
	}
	return "", false
}
