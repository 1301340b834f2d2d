// Package release decides what an upgrade of steadyplane itself may do: a
// release is steadyplane's own version (buildinfo.Release) with the
// Kubernetes version of its components, and moving a cluster from one to
// another obeys upstream's version-skew policy.
package release

import (
	"errors"
	"fmt"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/steadyplane/steadyplane/pkg/buildinfo"
)

// Versions is what one binary is: its steadyplane release and the
// Kubernetes version its components speak.
type Versions struct {
	Release    *utilversion.Version
	Kubernetes *utilversion.Version
}

// String is how a Node shows it: "v1.36.3+steadyplane-v0.4.0".
func (v Versions) String() string {
	return "v" + v.Kubernetes.String() + buildinfo.Suffix + "-v" + v.Release.String()
}

// ParseNodeVersion reads the version a Node reports (its kubelet version,
// a component's gitVersion): "v1.36.3+steadyplane-v0.4.0". A version with
// no steadyplane release (an upstream kubelet, or a build older than
// releases) is refused: nothing tells how far it may skew.
func ParseNodeVersion(s string) (Versions, error) {
	k8s, rel, ok := strings.Cut(s, buildinfo.Suffix+"-")
	if !ok {
		return Versions{}, fmt.Errorf("version %q names no steadyplane release (want v1.X.Y%s-v0.N.M)", s, buildinfo.Suffix)
	}
	kv, err := utilversion.ParseSemantic(k8s)
	if err != nil {
		return Versions{}, fmt.Errorf("version %q: Kubernetes version %q: %w", s, k8s, err)
	}
	rv, err := buildinfo.ParseRelease(rel)
	if err != nil {
		return Versions{}, fmt.Errorf("version %q: %w", s, err)
	}
	return Versions{Release: rv, Kubernetes: kv}, nil
}

// Node is one node of the cluster as an upgrade sees it.
type Node struct {
	Name string
	// Server: the node runs the control plane (etcd, the API server, the
	// controllers) besides its agent.
	Server bool
	// Versions is what the node runs now.
	Versions Versions
}

// Move is an upgrade asked for: to Target, or back to it (Rollback).
type Move struct {
	Target Versions
	// Rollback: going back to the release before, which may be one minor
	// older; otherwise the target must not be older than any server.
	Rollback bool
}

// MaxAgentSkew is how many Kubernetes minors a node agent may be behind
// the API servers: upstream's kubelet policy (n-3).
const MaxAgentSkew = 3

// CheckUpgrade says why the move must not start, nil when it may: the
// servers move first, one at a time, so during the roll they run the old
// and the new version side by side, and agents still run the old one
// until the servers are done. Upstream's policy then asks:
//   - API servers within one minor of each other: the target is at most
//     one Kubernetes minor from every server (no minor skipped);
//   - node agents never newer than the API servers, at most MaxAgentSkew
//     minors older than the target;
//   - steadyplane's own release moves one minor at a time too, and only
//     forward unless the move is a rollback; a development build
//     (buildinfo.DevRelease) moves to and from any release.
//
// Every violation is named, with its node.
func CheckUpgrade(nodes []Node, m Move) error {
	var errs []error
	servers := 0
	for _, n := range nodes {
		if n.Server {
			servers++
			errs = append(errs, checkServer(n, m)...)
		}
	}
	if servers == 0 {
		errs = append(errs, errors.New("no server found: an upgrade moves the servers first"))
	}
	for _, n := range nodes {
		errs = append(errs, checkAgent(n, nodes, m)...)
	}
	return errors.Join(errs...)
}

func checkServer(n Node, m Move) []error {
	var errs []error
	from, to := n.Versions, m.Target
	if d := minorDistance(from.Kubernetes, to.Kubernetes); d > 1 {
		errs = append(errs, fmt.Errorf("server %s runs Kubernetes %s: %s skips %d minor(s); move one minor at a time", n.Name, short(from.Kubernetes), short(to.Kubernetes), d-1))
	} else if d < 0 && (!m.Rollback || d < -1) {
		errs = append(errs, fmt.Errorf("server %s runs Kubernetes %s: %s is older%s", n.Name, short(from.Kubernetes), short(to.Kubernetes), rollbackHint(m)))
	}
	if isDev(from.Release) || isDev(to.Release) {
		return errs // a development build has no place in the release train
	}
	if from.Release.Major() != to.Release.Major() {
		errs = append(errs, fmt.Errorf("server %s runs release v%s: v%s is another major release", n.Name, from.Release, to.Release))
	} else if d := minorDistance(from.Release, to.Release); d > 1 {
		errs = append(errs, fmt.Errorf("server %s runs release v%s: v%s skips %d minor release(s); move one minor at a time", n.Name, from.Release, to.Release, d-1))
	} else if to.Release.LessThan(from.Release) && (!m.Rollback || d < -1) {
		errs = append(errs, fmt.Errorf("server %s runs release v%s: v%s is older%s", n.Name, from.Release, to.Release, rollbackHint(m)))
	}
	return errs
}

// checkAgent checks a worker's agent; a server's agent moves with its
// API server, and servers in the middle of a roll differ by design.
func checkAgent(n Node, nodes []Node, m Move) []error {
	if n.Server {
		return nil
	}
	var errs []error
	k := n.Versions.Kubernetes
	// While servers still run their old version the agent must not be
	// newer than any of them, nor than the target they move to.
	for _, s := range nodes {
		if s.Server && minorDistance(s.Versions.Kubernetes, k) > 0 {
			errs = append(errs, fmt.Errorf("node %s's agent runs Kubernetes %s, newer than server %s's %s: an agent is never newer than the API servers", n.Name, short(k), s.Name, short(s.Versions.Kubernetes)))
		}
	}
	if minorDistance(m.Target.Kubernetes, k) > 0 {
		errs = append(errs, fmt.Errorf("node %s's agent runs Kubernetes %s, newer than the target %s", n.Name, short(k), short(m.Target.Kubernetes)))
	}
	if d := minorDistance(k, m.Target.Kubernetes); d > MaxAgentSkew {
		errs = append(errs, fmt.Errorf("node %s's agent runs Kubernetes %s, %d minors behind %s (at most %d): upgrade it first", n.Name, short(k), d, short(m.Target.Kubernetes), MaxAgentSkew))
	}
	return errs
}

// isDev says v is buildinfo.DevRelease, a build given no release.
func isDev(v *utilversion.Version) bool {
	return v.String() == strings.TrimPrefix(buildinfo.DevRelease, "v")
}

// minorDistance is to's minor minus from's, across majors counted as far.
func minorDistance(from, to *utilversion.Version) int {
	if from.Major() != to.Major() {
		if to.Major() > from.Major() {
			return 1 << 16
		}
		return -(1 << 16)
	}
	return int(to.Minor()) - int(from.Minor())
}

func short(v *utilversion.Version) string {
	return fmt.Sprintf("v%d.%d.%d", v.Major(), v.Minor(), v.Patch())
}

func rollbackHint(m Move) string {
	if m.Rollback {
		return "; a rollback goes back one minor at most"
	}
	return "; going back is a rollback (steadyplane upgrade --rollback)"
}
