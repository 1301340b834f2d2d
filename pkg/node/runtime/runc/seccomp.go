package runc

import (
	"fmt"
	"os"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// applySeccomp sets s's seccomp filter from p: the default profile Docker and
// containerd give (its allowlist follows the capabilities already in s), or
// a Localhost profile's JSON. A privileged container gets none unless its
// profile is a Localhost one, as under containerd.
func applySeccomp(s *specs.Spec, p *runtime.Seccomp, privileged bool) error {
	if p == nil || privileged && p.RuntimeDefault {
		return nil
	}
	var (
		filter *specs.LinuxSeccomp
		err    error
	)
	if p.RuntimeDefault {
		filter, err = seccomp.GetDefaultProfile(s)
	} else {
		var body []byte
		body, err = os.ReadFile(p.LocalhostProfile)
		if err != nil {
			return fmt.Errorf("seccomp profile: %w", err)
		}
		filter, err = seccomp.LoadProfile(string(body), s)
	}
	if err != nil {
		return fmt.Errorf("seccomp profile: %w", err)
	}
	s.Linux.Seccomp = filter
	return nil
}
