package buildinfo

import (
	"strconv"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	// component-base's version variables are set by upstream's release
	// scripts with -ldflags -X; without them they hold placeholders that
	// clients cannot parse ("kubectl version" exits 1 on its own client
	// version). go:linkname reaches them from here, so that every build
	// of this binary, go install's too, reports its real version.
	"k8s.io/component-base/version"
	_ "unsafe"
)

//go:linkname componentGitVersion k8s.io/component-base/version.gitVersion
var componentGitVersion string

//go:linkname componentGitMajor k8s.io/component-base/version.gitMajor
var componentGitMajor string

//go:linkname componentGitMinor k8s.io/component-base/version.gitMinor
var componentGitMinor string

//go:linkname componentGitCommit k8s.io/component-base/version.gitCommit
var componentGitCommit string

//go:linkname componentGitTreeState k8s.io/component-base/version.gitTreeState
var componentGitTreeState string

// StampComponentVersion gives k8s.io/component-base/version (version.Get:
// what kubectl prints as its client version, what each component's
// --version and /version say) this binary's own version when the build set
// none: gitVersion as KubernetesGitVersion, major and minor from it, the
// commit this binary was built from. A build that set them with -ldflags
// keeps its own. main calls it before any component starts.
func StampComponentVersion() { stampComponentVersion(Get()) }

func stampComponentVersion(info Info) {
	if !strings.HasPrefix(componentGitVersion, placeholderPrefix) {
		return
	}
	s := stamp(info)
	if s.gitVersion == "" {
		return
	}
	componentGitVersion, componentGitMajor, componentGitMinor = s.gitVersion, s.major, s.minor
	componentGitCommit, componentGitTreeState = s.commit, s.treeState
	// version.Get reads gitVersion through a copy its init took; setting
	// the same version again is always allowed.
	_ = version.SetDynamicVersion(s.gitVersion)
}

// componentStamp is what StampComponentVersion writes.
type componentStamp struct {
	gitVersion, major, minor, commit, treeState string
}

// stamp is the component version info describes; an empty gitVersion
// when info has no Kubernetes version that parses.
func stamp(info Info) componentStamp {
	v, err := utilversion.ParseSemantic(info.GitVersion)
	if err != nil {
		return componentStamp{}
	}
	s := componentStamp{gitVersion: info.GitVersion, major: itoa(v.Major()), minor: itoa(v.Minor())}
	if info.Commit != "unknown" {
		s.commit, s.treeState = strings.TrimSuffix(info.Commit, "-dirty"), "clean"
		if strings.HasSuffix(info.Commit, "-dirty") {
			s.treeState = "dirty"
		}
	}
	return s
}

func itoa(u uint) string { return strconv.FormatUint(uint64(u), 10) }
