package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/internal/testup"
)

// TestKilledUpIsCleanedUp: after kill -9 of up with a pod running, its
// processes, containers and mounts are left (the next up adopts them);
// `steadyplane cleanup --remove-data` stops them all, unmounts and removes
// the data directory, so that nothing trips the user.
func TestKilledUpIsCleanedUp(t *testing.T) {
	testimage.RequireBusybox(t)
	bin, dataDir, ports, ctx := testup.Setup(t, 8*time.Minute)
	if err := testimage.BusyboxArchive(filepath.Join(dataDir, "images", "busybox.tar")); err != nil {
		t.Fatal(err)
	}
	up := testup.Start(t, bin, dataDir, ports)
	up.WaitUp(t, 4*time.Minute)
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	for _, args := range [][]string{
		{"run", "sleeper", "--image=" + testimage.BusyboxName, "--", "sleep", "3600"},
		{"wait", "--for=condition=Ready", "pod/sleeper", "--timeout=120s"},
	} {
		if out, err := testup.Kubectl(t, ctx, kubeconfig, args...); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	up.Kill(t)
	mounts := func() int {
		m, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(dataDir))
		return len(m)
	}
	left, mounted := len(testup.ChildPids(dataDir)), mounts()
	if left == 0 || mounted == 0 {
		t.Fatalf("after kill -9 of up: %d processes and %d mounts of its data directory left; the test needs some to clean", left, mounted)
	}
	t.Logf("after kill -9 of up: %d processes and %d mounts of its data directory left", left, mounted)
	out, err := exec.CommandContext(ctx, bin, "cleanup", "--data-dir", dataDir, "--cni-bridge", up.Flag("cni-bridge"), "--remove-data").CombinedOutput()
	t.Logf("steadyplane cleanup:\n%s", out)
	if err != nil {
		t.Fatalf("steadyplane cleanup: %v", err)
	}
	if pids := testup.ChildPids(dataDir); len(pids) > 0 {
		t.Errorf("processes of the data directory still running: %v", pids)
	}
	if n := mounts(); n > 0 {
		t.Errorf("%d mounts under the data directory left", n)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("the data directory is still there: %v", err)
	}
	if strings.Contains(string(out), "error") {
		t.Errorf("cleanup reported an error")
	}
}
