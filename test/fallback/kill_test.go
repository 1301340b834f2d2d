package fallback

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// TestKillMidRollout kills, with SIGKILL, each part of a rollout while it
// works: the startup monitor while a bad revision crash-loops, the
// installer while it waits for the installer lock, and the node agent
// while a good revision starts. After each, the rollout reaches its
// verdict as if nothing had happened, and exactly one API server runs, on
// the revision the status calls current, with no startup monitor left.
func TestKillMidRollout(t *testing.T) {
	ctx, dataDir, _ := testup.StartWalkthrough(t, 12*time.Minute,
		"--fallback-timeout=30s", "--fallback-retry-base=10m", "--fallback-retry-max=1h", noProxy)
	_, cs, api := clients(t, dataDir)
	layout := revisions.ForDataDir(dataDir, "kube-apiserver")

	t.Run("the startup monitor, while a bad revision crash-loops", func(t *testing.T) {
		failed := getCluster(ctx, t, api).Status.NodeStatuses[0].LastFailedRevision
		patch(ctx, t, api, `{"spec":{"extraArgs":["--no-such-flag"]}}`)
		pid := waitProcess(ctx, t, dataDir, "startup-monitor", 0)
		kill(t, pid)
		// The restarted monitor reads the starts from the agent's record.
		obj := waitCluster(ctx, t, api, 3*time.Minute, "the fallback", func(o *v1alpha1.KubeAPIServer) bool {
			return o.Status.NodeStatuses[0].LastFailedRevision > failed
		})
		if ns := obj.Status.NodeStatuses[0]; ns.LastFailedReason != string(fallback.CrashLooping) {
			t.Errorf("fallback %+v, want CrashLooping", ns)
		}
		rollOut(ctx, t, api, `{"spec":{"extraArgs":["--max-requests-inflight=600"]}}`)
		oneAPIServer(ctx, t, cs, api, dataDir)
	})

	t.Run("the installer, while it waits for the lock", func(t *testing.T) {
		// Holding the lock (as a startup monitor's look does) keeps the
		// installer at its first step, where the kill finds it.
		unlock, err := layout.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		patch(ctx, t, api, `{"spec":{"extraArgs":["--max-requests-inflight=601"]}}`)
		pid := waitProcess(ctx, t, dataDir, "installer", 0)
		kill(t, pid)
		unlock()
		rollOut(ctx, t, api, "")
		oneAPIServer(ctx, t, cs, api, dataDir)
	})

	t.Run("the node agent, while a good revision starts", func(t *testing.T) {
		patch(ctx, t, api, `{"spec":{"extraArgs":["--max-requests-inflight=602"]}}`)
		// The monitor runs once the installer wrote both manifests.
		waitProcess(ctx, t, dataDir, "startup-monitor", 0)
		agent := waitProcess(ctx, t, dataDir, "node", 0)
		kill(t, agent)
		waitProcess(ctx, t, dataDir, "node", agent) // "up" starts it again
		rollOut(ctx, t, api, "")
		oneAPIServer(ctx, t, cs, api, dataDir)
	})
}

// rollOut applies spec (none: "") and waits until the latest revision is
// current with Degraded False.
func rollOut(ctx context.Context, t *testing.T, api v1alpha1.Client, spec string) {
	t.Helper()
	if spec != "" {
		patch(ctx, t, api, spec)
	}
	before := time.Now()
	obj := waitCluster(ctx, t, api, 4*time.Minute, "the rollout", func(o *v1alpha1.KubeAPIServer) bool {
		ns := o.Status.NodeStatuses[0]
		return condition(o, v1alpha1.ConditionDegraded).Status == metav1.ConditionFalse && ns.TargetRevision == 0 &&
			ns.CurrentRevision == o.Status.LatestAvailableRevision && ns.LastFailedRevision < o.Status.LatestAvailableRevision
	})
	t.Logf("revision %d rolled out after %v", obj.Status.LatestAvailableRevision, time.Since(before).Round(100*time.Millisecond))
}

// oneAPIServer asserts that exactly one API server process runs, that its
// mirror pod is Ready on the revision the status calls current, and that
// no startup monitor is left.
func oneAPIServer(ctx context.Context, t *testing.T, cs kubernetes.Interface, api v1alpha1.Client, dataDir string) {
	t.Helper()
	ns := getCluster(ctx, t, api).Status.NodeStatuses[0]
	var servers, monitors []int
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		// A monitor removes its manifest as it leaves; the agent stops it then.
		servers, monitors = processes(dataDir, "apiserver"), processes(dataDir, "startup-monitor")
		if len(servers) == 1 && len(monitors) == 0 {
			break
		}
	}
	if len(servers) != 1 || len(monitors) != 0 {
		t.Errorf("API server processes %v (want one), startup monitors %v (want none)", servers, monitors)
	}
	mirror, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, "kube-apiserver-"+ns.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range mirror.Status.Conditions {
		ready = ready || c.Type == "Ready" && c.Status == "True"
	}
	if got := mirror.Annotations[fallback.RevisionAnnotation]; got != strconv.Itoa(int(ns.CurrentRevision)) || !ready {
		t.Errorf("the mirror pod is on revision %s (Ready %v); the status says %d", got, ready, ns.CurrentRevision)
	}
}

// processes are the pids of this run's processes of a steadyplane
// subcommand.
func processes(dataDir, subcommand string) []int {
	return procfs.Find(func(argv []string) bool {
		return len(argv) > 1 && argv[1] == subcommand && strings.Contains(strings.Join(argv, " "), dataDir)
	})
}

// waitProcess waits (at most 2 minutes, polling every 20ms) for a process
// of the subcommand other than not, and returns its pid.
func waitProcess(ctx context.Context, t *testing.T, dataDir, subcommand string, not int) int {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		for _, pid := range processes(dataDir, subcommand) {
			if pid != not {
				return pid
			}
		}
	}
	t.Fatalf("no %s process within 2 minutes", subcommand)
	return 0
}

func kill(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	t.Logf("killed %d", pid)
}
