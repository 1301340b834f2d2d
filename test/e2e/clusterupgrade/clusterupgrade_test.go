// Package clusterupgrade tests, end to end, that steadyplane upgrade rolls
// a release over a cluster of three servers and a worker in network
// namespaces of their own, falls back from a release that cannot start,
// and rolls back, every pod running all along. It has a package of its own
// so that it runs beside test/e2e, whose clusters use the machine's
// network namespace.
package clusterupgrade

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/release"
)

// releaseClusterCIDR is the pods' range of the cluster a release rolls over.
const releaseClusterCIDR = "10.218.0.0/16"

// TestReleaseRollsOverTheCluster rolls releases over three servers and a
// worker, each in a network namespace of its own, as a user would: up and
// node of release v0.9.1 on every host, a pod pinned to each node, and a
// client-go workload (reads, writes, a watch) through the HA client all
// along. steadyplane upgrade on one server asks for a broken v0.9.3, whose
// up exits at once: the first server it reaches dies, is started again as
// a service manager would, goes back to v0.9.1 by itself, and the rollout
// stops there, Degraded naming it, no other node touched. Then v0.9.2, a
// good release, rolls on: the operator asks one server at a time, the next once
// the one before is healthy on it, then the worker; every node fetches
// the binary from another (its digest checked) and hands over with its
// pods running. Then upgrade --rollback takes the cluster back to v0.9.1
// the same way. Every pod keeps its container and restart count.
func TestReleaseRollsOverTheCluster(t *testing.T) {
	if testing.Short() {
		testci.CannotRun(t, "-short: this test runs three steadyplane up and a node")
	}
	// The hosts run the releases this test builds, not the binary under
	// test.
	_, nw, hosts := testup.NetworkCluster(t, 3, 1, releaseClusterCIDR)
	v1, err := testenv.BinaryOfRelease("v0.9.1")
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := testenv.BinaryOfRelease("v0.9.2")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	info, err := release.DescribeBinary(ctx, fixed)
	if err != nil {
		t.Fatal(err)
	}
	broken, err := testenv.BrokenRelease("v0.9.3", info.Kubernetes)
	if err != nil {
		t.Fatal(err)
	}
	ups := make([]*testup.Up, len(hosts))
	for _, h := range hosts {
		t.Cleanup(func() {
			if h.Server {
				testup.KeepLogs(t, "release-"+h.Name, h.DataDir())
			}
			testenv.CleanHost(nw, h, v1)
		})
	}
	// start runs host i's up (or node) as a service manager would: the
	// binary it was installed with, the same arguments every time.
	start := func(i int) {
		u := testup.StartCmd(t, hosts[i].Name, hosts[i].Command(nw, v1))
		ups[i] = u
		// Killed, then cleaned up after (testenv.CleanHost): stopped in
		// turn, the last server would stop without etcd's quorum.
		t.Cleanup(func() {
			select {
			case <-u.Done():
			default:
				u.Kill(t)
			}
		})
	}
	s1 := hosts[0]
	begun := time.Now()
	start(0)
	ups[0].WaitUp(t, 5*time.Minute)
	for i := 1; i < len(hosts); i++ {
		if err := hosts[i].TakeToken(s1); err != nil {
			t.Fatal(err)
		}
		start(i)
		if hosts[i].Server {
			ups[i].WaitUp(t, 8*time.Minute)
		}
	}

	kubeconfig := filepath.Join(s1.DataDir(), "admin.kubeconfig")
	client := testup.HAClient(t, kubeconfig)
	names := []string{"s2", "s3", "steadyplane", "w4"}
	testup.WaitFor(t, ctx, 4*time.Minute, "four Ready nodes", func() (bool, string) {
		ready := testenv.ReadyNodes(ctx, client)
		return slices.Equal(ready, names), fmt.Sprintf("Ready: %v", ready)
	})
	t.Logf("three servers and a worker up in %.1fs", time.Since(begun).Seconds())

	// A pod on each node, which every move must leave as it is.
	for _, n := range names {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "keep-" + n}, Spec: corev1.PodSpec{NodeName: n,
			Containers: []corev1.Container{{Name: "sleep", Image: testimage.BusyboxName, Command: []string{"sleep", "86400"}}}}}
		if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testup.WaitFor(t, ctx, 3*time.Minute, "a Ready pod on each node", func() (bool, string) {
		s, ok := podStates(ctx, client, names)
		return ok, s
	})
	before, _ := podStates(ctx, client, names)

	load := testup.StartWorkload(ctx, t, kubeconfig, "release-workload")
	upgrade := func(args ...string) (string, error) {
		name, cmdArgs := nw.NSEnter(0, s1.HostName, v1, append([]string{"upgrade", "--data-dir", s1.DataDir(), "--wait", "20m"}, args...)...)
		out, err := exec.CommandContext(ctx, name, cmdArgs...).CombinedOutput()
		t.Logf("steadyplane upgrade %v:\n%s", args, out)
		return string(out), err
	}
	nodesOn := func(version string) []string {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var on []string
		for _, n := range list.Items {
			if strings.HasSuffix(n.Status.NodeInfo.KubeletVersion, "+steadyplane-"+version) {
				on = append(on, n.Name)
			}
		}
		slices.Sort(on)
		return on
	}
	unchanged := func(step string) {
		t.Helper()
		var now string
		testup.WaitFor(t, ctx, 2*time.Minute, step+": the pods as they were", func() (bool, string) {
			now, _ = podStates(ctx, client, names)
			return now == before, now
		})
	}

	// A broken release: the first server it reaches dies with it.
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	began := time.Now()
	go func() {
		out, err := upgrade("--binary", broken)
		done <- result{out, err}
	}()
	select {
	case <-ups[1].Done():
	case <-time.After(5 * time.Minute):
		t.Fatal("s2's up did not exit with the broken release within 5 minutes")
	}
	t.Logf("s2's up exited on v0.9.3 %.1fs after the upgrade began; started again, as a service manager would", time.Since(began).Seconds())
	restarted := time.Now()
	start(1)
	ups[1].WaitUp(t, 5*time.Minute)
	var res result
	select {
	case res = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("upgrade to the broken release did not return within 5 minutes of s2's fallback")
	}
	t.Logf("s2 up again on v0.9.1 and the rollout stopped %.1fs after its restart", time.Since(restarted).Seconds())
	if res.err == nil || !strings.Contains(res.out, "release v0.9.3 stopped") || !strings.Contains(res.out, "node s2") {
		t.Errorf("upgrade to the broken release: %v; want it stopped at node s2", res.err)
	}
	if !strings.Contains(ups[1].Text(), "release v0.9.3 failed (Exited") {
		t.Errorf("s2's up, started again, does not say v0.9.3 failed")
	}
	if on := nodesOn("v0.9.1"); !slices.Equal(on, names) {
		t.Errorf("nodes on v0.9.1 after the broken release: %v, want all of %v (s2 back, no other touched)", on, names)
	}
	k := kubeAPIServer(ctx, t, kubeconfig)
	if c := meta.FindStatusCondition(k.Status.Release.Conditions, v1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "node s2") {
		t.Errorf("the release's Degraded condition: %+v; want True naming node s2", c)
	}
	unchanged("after the broken release")

	// A good release rolls on from where the broken one stopped.
	began = time.Now()
	out, err := upgrade("--binary", fixed)
	t.Logf("the cluster moved to v0.9.2 in %.1fs", time.Since(began).Seconds())
	if err != nil || !strings.Contains(out, "every node runs release v0.9.2") {
		t.Fatalf("upgrade to v0.9.2: %v", err)
	}
	if on := nodesOn("v0.9.2"); !slices.Equal(on, names) {
		t.Errorf("nodes on v0.9.2: %v, want all of %v", on, names)
	}
	k = kubeAPIServer(ctx, t, kubeconfig)
	logMoves(t, k)
	if order := moveOrder(ctx, t, client, "v0.9.2"); !slices.Equal(order, names) {
		t.Errorf("the nodes moved in the order %v, want the servers by name, then the worker: %v", order, names)
	}
	if c := meta.FindStatusCondition(k.Status.Release.Conditions, v1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("the release's Degraded condition after the fix: %+v; want False", c)
	}
	unchanged("after the move to v0.9.2")

	// Going back is one command: the release s1 ran before, v0.9.1, rolls
	// over the cluster as any release does (each node still has its
	// binary).
	began = time.Now()
	out, err = upgrade("--rollback")
	t.Logf("the cluster went back to v0.9.1 in %.1fs", time.Since(began).Seconds())
	if err != nil || !strings.Contains(out, "every node runs release v0.9.1") {
		t.Fatalf("upgrade --rollback: %v", err)
	}
	if on := nodesOn("v0.9.1"); !slices.Equal(on, names) {
		t.Errorf("nodes on v0.9.1 after the rollback: %v, want all of %v", on, names)
	}
	logMoves(t, kubeAPIServer(ctx, t, kubeconfig))
	if order := moveOrder(ctx, t, client, "v0.9.1"); !slices.Equal(order, names) {
		t.Errorf("the nodes went back in the order %v, want %v", order, names)
	}
	unchanged("after the rollback to v0.9.1")

	r := load.Stop()
	t.Logf("client workload through the three rollouts: %s", r)
	if r.FailedReads > 0 || r.LostEvents > 0 {
		t.Errorf("the client workload saw %d failed reads and %d lost watch events; want none", r.FailedReads, r.LostEvents)
	}
}

// logMoves logs each node's time to move, from the operator's status.
func logMoves(t *testing.T, k *v1alpha1.KubeAPIServer) {
	t.Helper()
	var moves []string
	for _, n := range k.Status.Release.Nodes {
		if n.Asked != nil && n.Moved != nil {
			moves = append(moves, fmt.Sprintf("%s %.1fs", n.NodeName, n.Moved.Sub(n.Asked.Time).Seconds()))
		}
	}
	t.Logf("release %s, each node's move (asked to healthy on it): %s", k.Status.Release.Version, strings.Join(moves, ", "))
}

// podStates is each keep-<node> pod's container ID, restart count and
// readiness, and whether all are Ready.
func podStates(ctx context.Context, client kubernetes.Interface, nodes []string) (string, bool) {
	var b strings.Builder
	all := true
	for _, n := range nodes {
		p, err := client.CoreV1().Pods("default").Get(ctx, "keep-"+n, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			all = false
			fmt.Fprintf(&b, "%s: %v; ", n, err)
			continue
		}
		cs := p.Status.ContainerStatuses[0]
		all = all && cs.Ready
		fmt.Fprintf(&b, "%s: %s restarts=%d ready=%v; ", n, cs.ContainerID, cs.RestartCount, cs.Ready)
	}
	return b.String(), all
}

// moveOrder is the order in which the operator asked nodes to move to
// version, from its ReleaseMove Events.
func moveOrder(ctx context.Context, t *testing.T, client kubernetes.Interface, version string) []string {
	events, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=ReleaseMove"})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(events.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	var order []string
	for _, e := range events.Items {
		var node string
		if strings.HasSuffix(e.Message, " to release "+version) && strings.HasPrefix(e.Message, "node ") {
			node, _, _ = strings.Cut(strings.TrimPrefix(e.Message, "node "), ":")
			order = append(order, node)
		}
	}
	return order
}

func kubeAPIServer(ctx context.Context, t *testing.T, kubeconfig string) *v1alpha1.KubeAPIServer {
	t.Helper()
	cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := v1alpha1.Client{Dynamic: dynamic.NewForConfigOrDie(cfg)}.Get(ctx, v1alpha1.Name)
	if err != nil {
		t.Fatal(err)
	}
	if k.Status.Release == nil {
		t.Fatal("the KubeAPIServer has no status.release")
	}
	return k
}
