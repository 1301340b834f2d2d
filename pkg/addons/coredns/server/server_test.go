package server

import (
	"slices"
	"strings"
	"testing"

	"github.com/steadyplane/steadyplane/pkg/addons/coredns"
)

// TestCorefileUsesOnlyCompiledPlugins: every directive of the cluster's
// Corefile (a line one level into the server block) is a plugin compiled
// in; CoreDNS would refuse the file at start otherwise, and the DNS pod
// would crash-loop.
func TestCorefileUsesOnlyCompiledPlugins(t *testing.T) {
	for _, forward := range []bool{true, false} {
		cf := coredns.Corefile(coredns.Config{Domain: "cluster.local", ServiceIP: "10.96.0.10", APIServer: "https://10.0.0.1:6443", Forward: forward})
		seen := 0
		for _, line := range strings.Split(cf, "\n") {
			rest, ok := strings.CutPrefix(line, "    ")
			if !ok || strings.HasPrefix(rest, " ") || strings.TrimSpace(rest) == "" || rest == "}" {
				continue
			}
			seen++
			if d := strings.Fields(rest)[0]; !slices.Contains(Plugins, d) {
				t.Errorf("the Corefile uses %q, which is not compiled in (%v):\n%s", d, Plugins, cf)
			}
		}
		if seen < 6 {
			t.Errorf("found %d directives in the Corefile, want its plugins:\n%s", seen, cf)
		}
	}
}
