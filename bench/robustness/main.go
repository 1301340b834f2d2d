// Command robustness runs the chaos test longer than CI does: --seeds
// seeds, each --length of faults (internal/robustness/faults: kills,
// pauses, black holes, lossy links, overlapping, never two servers down at
// once) on a fresh cluster of three servers and a worker, with --clients
// clients and --watchers watchers through the failover client, and every
// history checked (linearizability per object, watch guarantees,
// resourceVersion order). It prints, per seed and over all, the
// operations, the violations (goal 0), and per fault kind the median and
// worst time a client went without an answer, for reads and for writes.
// A seed with violations leaves its report under --reports (every seed,
// with --report-always).
//
//	sudo go run ./bench/robustness --seeds 10 --length 10m
//	sudo go run ./bench/robustness --first-seed 7 --seeds 1   # replay seed 7
//	sudo go run ./bench/robustness --kinds kill-apiserver     # one kind, no overlap
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/steadyplane/steadyplane/internal/robustness/check"
	"github.com/steadyplane/steadyplane/internal/robustness/cluster"
	"github.com/steadyplane/steadyplane/internal/robustness/faults"
	"github.com/steadyplane/steadyplane/internal/robustness/run"
	"github.com/steadyplane/steadyplane/internal/testenv"
)

func main() {
	first := flag.Int64("first-seed", 1, "the first seed; seeds follow it")
	seeds := flag.Int("seeds", 3, "how many seeds to run, each on a fresh cluster")
	length := flag.Duration("length", 3*time.Minute, "how long each seed's faults go on")
	clients := flag.Int("clients", 4, "clients making operations at once")
	watchers := flag.Int("watchers", 2, "watchers at once")
	objects := flag.Int("objects", 10, "ConfigMaps the clients share")
	qps := flag.Float64("qps", 20, "each client's most requests a second (how finely a gap is seen)")
	kinds := flag.String("kinds", "", "comma-separated fault kinds to draw from (default every kind: "+fmt.Sprint(faults.Kinds)+"); one kind alone measures its gaps without overlap")
	always := flag.Bool("report-always", false, "write every seed's report, not only those with violations")
	reports := flag.String("reports", filepath.Join(os.TempDir(), "steadyplane-robustness"), "directory of the reports of seeds with violations")
	flag.Parse()
	drawn, err := faults.ParseKinds(*kinds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "robustness: --kinds:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench(ctx, *first, *seeds, *length, run.Config{Clients: *clients, Watchers: *watchers, Objects: *objects, QPS: float32(*qps), ReportDir: *reports, AlwaysReport: *always, Kinds: drawn}); err != nil {
		fmt.Fprintln(os.Stderr, "robustness:", err)
		os.Exit(1)
	}
}

func bench(ctx context.Context, first int64, seeds int, length time.Duration, base run.Config) error {
	bin, err := testenv.Binary()
	if err != nil {
		return err
	}
	var gaps []check.Gap
	ops, violations := 0, 0
	for seed := first; seed < first+int64(seeds); seed++ {
		work, err := os.MkdirTemp("", "bench-robustness-")
		if err != nil {
			return err
		}
		fmt.Printf("seed %d: starting three servers and a worker ...\n", seed)
		c, err := cluster.Start(ctx, bin, filepath.Join(work, "cluster"), 3, 1, logf)
		if err != nil {
			os.RemoveAll(work)
			return err
		}
		cfg := base
		cfg.Seed, cfg.Length = seed, length
		res, err := run.Run(ctx, c, cfg, logf)
		c.Close()
		os.RemoveAll(work)
		if err != nil {
			return err
		}
		for _, l := range res.Summary() {
			fmt.Println(l)
		}
		for _, v := range res.Check.Violations {
			fmt.Println("  violation:", v)
		}
		if res.Report != "" {
			fmt.Println("  report:", res.Report)
		}
		ops += res.Check.Operations
		violations += len(res.Check.Violations)
		gaps = append(gaps, res.Gaps...)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	fmt.Printf("\n%d seeds x %s: %d operations, %d violations\n", seeds, length, ops, violations)
	fmt.Println("| fault | windows x clients | reads median | reads worst | writes median | writes worst |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, k := range run.GapsByKind(gaps) {
		fmt.Printf("| %s | %d | %s | %s | %s | %s |\n", k.Kind, k.N, k.ReadMedian.Round(time.Millisecond), k.ReadWorst.Round(time.Millisecond),
			k.WriteMedian.Round(time.Millisecond), k.WriteWorst.Round(time.Millisecond))
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Printf("  %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
