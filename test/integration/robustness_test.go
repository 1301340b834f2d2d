package integration

import (
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/robustness/check"
	"github.com/steadyplane/steadyplane/internal/robustness/history"
	"github.com/steadyplane/steadyplane/internal/robustness/traffic"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
)

// TestRobustnessHistoryThroughFailover runs the robustness traffic (four
// clients of compare-and-swap updates, creates, deletes, gets and lists on
// five ConfigMaps, two watchers) through the failover client against
// three API servers, kills -9 the first server's API server a third of the
// way in and starts it again, and holds the history to the checks:
// linearizable per object, resourceVersions in the order of the writes,
// every watcher's stream complete and in order. It also checks the
// checks: a history from a real API server is no violation.
func TestRobustnessHistoryThroughFailover(t *testing.T) {
	ctx, c := startHACluster(t, 3, 4*time.Minute)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientconfig.WriteKubeconfig(kc, c.URL(0), "admin", c.PKI.CA, c.PKI.Admin, []string{c.Host(0), c.Host(1), c.Host(2)}); err != nil {
		t.Fatal(err)
	}
	const ns = "robustness"
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig(1))
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	rec := history.NewRecorder()
	names := []string{"o1", "o2", "o3", "o4", "o5"}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for id := range 4 {
		// Each client its own failover client, as separate programs.
		cfg, _, err := clientconfig.Load(kc, clientconfig.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.QPS = -1 // paced below, as the chaos run: one operation every 50 ms
		cl := &traffic.Client{ID: id, ConfigMaps: kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns), Names: names,
			Recorder: rec, Rand: rand.New(rand.NewSource(int64(id))), Timeout: 10 * time.Second, Pace: rate.NewLimiter(20, 1)}
		wg.Go(func() { cl.Run(runCtx) })
	}
	watches := make([]history.Watch, 2)
	for id := range watches {
		cfg, _, err := clientconfig.Load(kc, clientconfig.Options{})
		if err != nil {
			t.Fatal(err)
		}
		w := &traffic.Watcher{ID: id, ConfigMaps: kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns), Recorder: rec, Retry: 100 * time.Millisecond}
		wg.Go(func() { watches[id] = w.Run(runCtx) })
	}

	time.Sleep(5 * time.Second)
	killedAt := rec.Since()
	c.KillAPIServer(0)
	time.Sleep(3 * time.Second)
	if err := c.RestartAPIServer(ctx, 0); err != nil {
		t.Fatal(err)
	}
	backAt := rec.Since()
	time.Sleep(5 * time.Second)
	stop()
	wg.Wait()

	ops := rec.Ops()
	r := check.History(ops, watches, time.Minute)
	answered := 0
	for _, op := range ops {
		if op.Output.Result != "unknown" {
			answered++
		}
	}
	t.Logf("%d operations (%d answered, %d with an unknown outcome), linearizable: %s; watch events %d and %d, resumed %d and %d times",
		r.Operations, answered, r.Unknown, r.Linearizable, len(watches[0].Events), len(watches[1].Events), watches[0].Resumed, watches[1].Resumed)
	for _, g := range check.Gaps(ops, []check.Window{{Kind: "kill -9 of an API server", From: killedAt, To: backAt}}) {
		t.Logf("client %d: longest gap around the kill: reads %s, writes %s", g.Client, g.Reads.Round(time.Millisecond), g.Writes.Round(time.Millisecond))
	}
	if !r.OK() {
		dir, err := os.MkdirTemp("", "robustness-report-")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.WriteReport(dir, ops, watches, map[string]any{"killed": killedAt, "back": backAt}); err != nil {
			t.Error(err)
		}
		t.Errorf("violations (report in %s):\n%v", dir, r.Violations)
	}
	if answered < 100 || len(watches[0].Events) < 20 {
		t.Errorf("only %d operations answered and %d watch events: the run checked too little", answered, len(watches[0].Events))
	}
}
