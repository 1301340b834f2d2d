// Package robustness runs the chaos test: three servers and a worker of
// steadyplane in network namespaces, traffic through the failover client,
// a seeded plan of overlapping faults, and every client history checked
// (internal/robustness). bench/robustness runs longer and more seeds.
package robustness

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/steadyplane/steadyplane/internal/robustness/cluster"
	"github.com/steadyplane/steadyplane/internal/robustness/run"
	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
)

// seedEnv replays a seed: STEADYPLANE_ROBUSTNESS_SEED=7 go test ./test/robustness.
const seedEnv = "STEADYPLANE_ROBUSTNESS_SEED"

// TestChaos is CI's short seeded run: two minutes of faults of every kind
// on three servers and a worker, four clients and two watchers; every
// history must pass the checks. A failure leaves its report (history,
// plan, seed, the servers' logs) and says how to replay it.
func TestChaos(t *testing.T) {
	if testing.Short() {
		testci.CannotRun(t, "-short: this test runs three servers and a worker")
	}
	testenv.RequireNetwork(t)
	testimage.RequireBusybox(t)
	testenv.RequireUnusedRange(t, cluster.PodRange)
	seed := int64(1)
	if s := os.Getenv(seedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
	}
	bin, err := testenv.Binary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	work := t.TempDir()
	c, err := cluster.Start(ctx, bin, filepath.Join(work, "cluster"), 3, 1, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reports, err := os.MkdirTemp("", "steadyplane-robustness-")
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Run(ctx, c, run.Config{Seed: seed, Length: 2 * time.Minute, Clients: 4, Watchers: 2, Objects: 10, QPS: 20, ReportDir: reports}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range res.Summary() {
		t.Log(l)
	}
	if !res.Check.OK() {
		t.Errorf("seed %d: %d violations (report: %s; replay: %s=%d go test ./test/robustness -run TestChaos):", seed, len(res.Check.Violations), res.Report, seedEnv, seed)
		for i, v := range res.Check.Violations {
			if i == 20 {
				t.Errorf("... and %d more", len(res.Check.Violations)-i)
				break
			}
			t.Error(v)
		}
		return
	}
	os.RemoveAll(reports)
	// A run that checked little proves little: an unreachable cluster
	// gives a history of failures, which is linearizable.
	if res.Answered < 1000 || res.AcknowledgedWrites < 200 {
		t.Errorf("%d operations answered, %d writes acknowledged in two minutes: the run checked too little", res.Answered, res.AcknowledgedWrites)
	}
	for _, w := range res.Watches {
		if len(w.Events) < 100 {
			t.Errorf("watcher %d saw %d events: too few", w.Watcher, len(w.Events))
		}
	}
	applied := 0
	for _, f := range res.Faults {
		if f.Err == "" {
			applied++
		}
	}
	if applied < 3 {
		t.Errorf("%d faults applied, want several", applied)
	}
}
