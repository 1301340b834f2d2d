// Package run is one robustness run: traffic through the failover client
// on a cluster while a seeded plan of faults plays out, then the checks
// on what the clients saw, and a report when one fails.
package run

import (
	"context"
	"fmt"
	"math/rand"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/robustness/check"
	"github.com/steadyplane/steadyplane/internal/robustness/cluster"
	"github.com/steadyplane/steadyplane/internal/robustness/faults"
	"github.com/steadyplane/steadyplane/internal/robustness/history"
	"github.com/steadyplane/steadyplane/internal/robustness/model"
	"github.com/steadyplane/steadyplane/internal/robustness/traffic"
	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
)

// Config is a run's.
type Config struct {
	Seed   int64
	Length time.Duration
	// Clients and Watchers run at once, each with a failover client of
	// its own, as separate programs would.
	Clients, Watchers int
	// Objects is how many ConfigMaps the clients share.
	Objects int
	// QPS is each client's most operations a second (a list counts one):
	// what the traffic costs the machine. The pacing is the client's own,
	// outside client-go, so that it is not counted in a gap.
	QPS float32
	// Kinds are the faults drawn (all when empty).
	Kinds []faults.Kind
	// ReportDir is where a failed run's report goes (a directory per
	// seed under it); with AlwaysReport, every run's.
	ReportDir    string
	AlwaysReport bool
}

// Result is what a run did and found.
type Result struct {
	Seed    int64
	Check   check.Result
	Faults  []faults.Applied
	Gaps    []check.Gap
	Watches []history.Watch
	// Answered counts the operations the servers answered (a list's
	// objects once), AcknowledgedWrites the writes they applied.
	Answered, AcknowledgedWrites int
	// Report is the report's directory, when the checks failed.
	Report string
}

// settle is how long traffic goes on after the last fault, so that the
// history ends on a healthy cluster.
const settle = 5 * time.Second

// Run runs cfg's traffic and faults on c and checks the history.
func Run(ctx context.Context, c *cluster.Cluster, cfg Config, logf func(string, ...any)) (Result, error) {
	res := Result{Seed: cfg.Seed}
	ns := fmt.Sprintf("robustness-%d", cfg.Seed)
	admin, err := newClient(c.Kubeconfig)
	if err != nil {
		return res, err
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("namespace %s: %w", ns, err)
	}
	names := make([]string, cfg.Objects)
	for i := range names {
		names[i] = fmt.Sprintf("o%d", i)
	}
	rec := history.NewRecorder()
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	var wg sync.WaitGroup
	for id := range cfg.Clients {
		cs, err := newClient(c.Kubeconfig)
		if err != nil {
			return res, err
		}
		cl := &traffic.Client{ID: id, ConfigMaps: cs.CoreV1().ConfigMaps(ns), Names: names, Recorder: rec,
			Rand: rand.New(rand.NewSource(cfg.Seed*1000 + int64(id))), Timeout: 20 * time.Second,
			Pace: pace(cfg.QPS)}
		wg.Go(func() { cl.Run(trafficCtx) })
	}
	res.Watches = make([]history.Watch, cfg.Watchers)
	for id := range cfg.Watchers {
		cs, err := newClient(c.Kubeconfig)
		if err != nil {
			return res, err
		}
		w := &traffic.Watcher{ID: id, ConfigMaps: cs.CoreV1().ConfigMaps(ns), Recorder: rec, Retry: 100 * time.Millisecond}
		wg.Go(func() { res.Watches[id] = w.Run(trafficCtx) })
	}

	plan := faults.Plan(cfg.Seed, faults.Options{Length: cfg.Length, Servers: c.Servers, Kinds: cfg.Kinds, MinGap: 3 * time.Second, MaxGap: 12 * time.Second})
	logf("seed %d: %d faults over %s", cfg.Seed, len(plan), cfg.Length)
	res.Faults = faults.Inject(ctx, c, plan, rec.Since, logf)
	last := rec.Since()
	select {
	case <-ctx.Done():
	case <-time.After(settle):
	}
	stopTraffic()
	wg.Wait()

	ops := rec.Ops()
	for _, op := range ops {
		if op.Output.Result != model.Unknown && !op.FromList {
			res.Answered++
			if op.Output.Result == model.OK && op.Kind != model.Get {
				res.AcknowledgedWrites++
			}
		}
	}
	res.Check = check.History(ops, res.Watches, 5*time.Minute)
	windows := []check.Window{{Kind: "whole run", From: 0, To: last}}
	for _, f := range res.Faults {
		if f.Err == "" {
			windows = append(windows, check.Window{Kind: string(f.Kind), From: f.Began, To: f.Ended})
		}
	}
	res.Gaps = check.Gaps(ops, windows)
	for _, f := range res.Faults {
		if f.Err != "" {
			res.Check.Violations = append(res.Check.Violations, fmt.Sprintf("fault %s on server %d at %s not applied: %s", f.Kind, f.Host, f.At, f.Err))
		}
	}
	if (!res.Check.OK() || cfg.AlwaysReport) && cfg.ReportDir != "" {
		res.Report = filepath.Join(cfg.ReportDir, fmt.Sprintf("seed-%d", cfg.Seed))
		extra := map[string]any{"seed": cfg.Seed, "length": cfg.Length.String(), "clients": cfg.Clients, "watchers": cfg.Watchers,
			"objects": cfg.Objects, "kinds": cfg.Kinds, "plan": plan, "faults": res.Faults}
		if err := res.Check.WriteReport(res.Report, ops, res.Watches, extra); err != nil {
			return res, err
		}
		for name, dir := range c.LogDirs() {
			// Best effort: the report stands without the logs.
			_ = exec.Command("cp", "-r", dir, filepath.Join(res.Report, "logs-"+name)).Run()
		}
	}
	return res, nil
}

// pace spaces one client's operations: qps a second, or unlimited when
// qps is not above 0.
func pace(qps float32) *rate.Limiter {
	if qps <= 0 {
		return rate.NewLimiter(rate.Inf, 1)
	}
	return rate.NewLimiter(rate.Limit(qps), 1)
}

// newClient is a client of its own through the failover client, without
// client-go's limit of 5 requests a second: the traffic paces itself.
func newClient(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{})
	if err != nil {
		return nil, err
	}
	cfg.QPS = -1 // no client-side limiter
	return kubernetes.NewForConfig(cfg)
}

// Summary is the run's figures as lines: operations, violations, and per
// fault kind the median and worst gap for reads and for writes.
func (r Result) Summary() []string {
	lines := []string{fmt.Sprintf("seed %d: %d operations (%d answered, %d writes acknowledged, %d outcome unknown), linearizable %s, %d violations",
		r.Seed, r.Check.Operations, r.Answered, r.AcknowledgedWrites, r.Check.Unknown, r.Check.Linearizable, len(r.Check.Violations))}
	for _, k := range GapsByKind(r.Gaps) {
		lines = append(lines, fmt.Sprintf("  %-16s n=%-3d reads median %s worst %s; writes median %s worst %s",
			k.Kind, k.N, k.ReadMedian.Round(time.Millisecond), k.ReadWorst.Round(time.Millisecond),
			k.WriteMedian.Round(time.Millisecond), k.WriteWorst.Round(time.Millisecond)))
	}
	return lines
}

// KindGaps are the gaps of one fault kind.
type KindGaps struct {
	Kind                    string
	N                       int
	ReadMedian, ReadWorst   time.Duration
	WriteMedian, WriteWorst time.Duration
}

// GapsByKind groups gaps by their window's kind, in the order kinds first
// appear.
func GapsByKind(gaps []check.Gap) []KindGaps {
	var order []string
	reads, writes := map[string][]time.Duration{}, map[string][]time.Duration{}
	for _, g := range gaps {
		k := g.Window.Kind
		if _, ok := reads[k]; !ok {
			order = append(order, k)
		}
		reads[k] = append(reads[k], g.Reads)
		writes[k] = append(writes[k], g.Writes)
	}
	var out []KindGaps
	for _, k := range order {
		out = append(out, KindGaps{Kind: k, N: len(reads[k]),
			ReadMedian: testenv.Median(reads[k]), ReadWorst: slices.Max(reads[k]),
			WriteMedian: testenv.Median(writes[k]), WriteWorst: slices.Max(writes[k])})
	}
	return out
}
