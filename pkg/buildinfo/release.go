package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/version"
)

// Release is steadyplane's own release, set when the binary is built:
//
//	go build -ldflags "-X github.com/steadyplane/steadyplane/pkg/buildinfo.Release=v0.4.0" ./cmd/steadyplane
//
// A build without it reports DevRelease.
var Release = ""

// DevRelease is the release of a build that was given none. It orders
// below every real release, so skew checks treat it as the oldest.
const DevRelease = "v0.0.0-dev"

// Info is what a binary says of itself: `steadyplane version`, the
// steadyplane_build_info metric and the Node's kubelet version.
type Info struct {
	// Release is steadyplane's release (Release, or DevRelease).
	Release string `json:"release"`
	// Commit is the VCS revision the binary was built from, "-dirty"
	// appended when the tree had changes; "unknown" for builds that record
	// none (go run, go test).
	Commit string `json:"commit"`
	// Kubernetes is the Kubernetes version of the imported components
	// (kube-apiserver, controller-manager, scheduler, kube-proxy).
	Kubernetes string `json:"kubernetes"`
	// GitVersion is what components report as their gitVersion: the
	// Kubernetes version with the release as build metadata.
	GitVersion string `json:"gitVersion"`
	// Go is the Go toolchain the binary was built with.
	Go string `json:"go"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get describes this binary. Its release is Release as set, whether valid
// or not: CheckRelease tells.
func Get() Info {
	return describe(releaseOrDev(Release), debug.ReadBuildInfo)
}

// CheckRelease returns an error when the release set at build time is no
// release version. Commands that start components refuse to run then: the
// release goes into every component's version, which clients parse.
func CheckRelease() error {
	_, err := ParseRelease(Release)
	return err
}

// CurrentRelease is this binary's release, parsed; DevRelease's when the
// one set is not valid (CheckRelease says so).
func CurrentRelease() *utilversion.Version {
	v, err := ParseRelease(Release)
	if err != nil {
		return utilversion.MustParseSemantic(DevRelease)
	}
	return v
}

func releaseOrDev(s string) string {
	if s == "" {
		return DevRelease
	}
	return s
}

func describe(release string, read func() (*debug.BuildInfo, bool)) Info {
	info := Info{Release: release, Commit: "unknown", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := read(); ok {
		info.Commit = commit(bi)
		info.Kubernetes, _ = KubernetesVersion(bi)
	}
	info.GitVersion = gitVersion(version.Get().GitVersion, release, read)
	return info
}

// commit is the VCS revision the go command stamped into bi.
func commit(bi *debug.BuildInfo) string {
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "unknown"
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// ParseRelease reads a release as "vMAJOR.MINOR.PATCH" with an optional
// pre-release ("v0.5.0-rc.1"); "" is DevRelease. Build metadata ("+...")
// is refused: the release itself goes into the components' build metadata.
func ParseRelease(s string) (*utilversion.Version, error) {
	s = releaseOrDev(s)
	v, err := utilversion.ParseSemantic(s)
	if err == nil && v.BuildMetadata() != "" {
		return nil, fmt.Errorf("release %q has build metadata (%q); a release is vMAJOR.MINOR.PATCH[-PRE]", s, v.BuildMetadata())
	}
	// Written exactly as it reads back: no spaces, no leading zeros.
	if err != nil || s != "v"+v.String() {
		return nil, fmt.Errorf("release %q is not a version like v0.5.0 (set it with -ldflags -X github.com/steadyplane/steadyplane/pkg/buildinfo.Release=v0.5.0)", s)
	}
	return v, nil
}
