package testup

import (
	"testing"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
)

// NetworkCluster lays out servers servers and workers workers on test
// hosts of their own (testenv.ClusterLayout), their pods in podRange (a
// /16 no route of the machine uses), and returns the binary they run,
// the network (closed when t ends) and the hosts. A machine that cannot
// make them ends t (testenv.RequireNetwork).
func NetworkCluster(t *testing.T, servers, workers int, podRange string) (bin string, nw *testenv.Network, hosts []*testenv.ClusterHost) {
	t.Helper()
	testenv.RequireNetwork(t)
	testimage.RequireBusybox(t)
	testenv.RequireUnusedRange(t, podRange)
	bin, err := testenv.Binary()
	if err != nil {
		t.Fatal(err)
	}
	if nw, err = testenv.NewNetwork(servers + workers); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nw.Close)
	if hosts, err = testenv.ClusterLayout(nw, t.TempDir(), servers, workers, podRange); err != nil {
		t.Fatal(err)
	}
	return bin, nw, hosts
}
