// Command cluster measures a whole "steadyplane up" cluster on 127.0.0.1, in
// one run:
//
//   - "up" cold (a new data directory each time) and warm (the last one
//     again), --runs times each: the API server ready as up says it and as
//     a client polling /readyz sees it, every component ready ("steadyplane
//     is up"), and when each of up's progress lines came, as medians;
//
//   - each process's PSS once the cluster has idled for --settle: the
//     API server, etcd, the controllers, the node agent, up itself, CoreDNS
//     and the containers' monitors; and again with --pods more pods running;
//
//   - a rollout of a --replicas Deployment whose app needs 3s before it
//     serves, in a namespace with the load-balancer gate and in one without:
//     its duration, and the fewest pods passing an outside HTTP check in any
//     100ms sample.
//
//     sudo go run ./bench/cluster [--runs 5] [--settle 20s] [--pods 100] [--replicas 5]
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
)

func main() {
	replicas := flag.Int("replicas", 5, "replicas of the Deployment rolled out (0: no rollouts)")
	runs := flag.Int("runs", 5, "cold and warm starts each")
	settle := flag.Duration("settle", 20*time.Second, "idle time before the processes' memory is read")
	load := flag.Int("pods", 100, "pods running (busybox sleep) when the memory is read again (0: not again)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, max(*runs, 1), *settle, *load, *replicas); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, runs int, settle time.Duration, load, replicas int) error {
	bin, err := testenv.Binary()
	if err != nil {
		return err
	}
	kubectlBin, err := testenv.Kubectl()
	if err != nil {
		return err
	}
	var colds, warms []*testenv.UpRun
	var b *testenv.BenchUp
	for i := range runs {
		if b != nil {
			b.Cleanup()
		}
		if b, err = testenv.NewBenchUp("cluster", 248, "spc"); err != nil {
			return err
		}
		cold, err := testenv.StartUp(ctx, bin, b.Args)
		if err != nil {
			b.Cleanup()
			return err
		}
		cold.Stop()
		report("cold", i+1, cold)
		colds = append(colds, cold)
	}
	defer b.Cleanup()
	dataDir, args := b.DataDir, b.Args
	// The app runs from busybox, imported at start as a user would bring
	// it to a machine without a registry.
	if err := testimage.BusyboxArchive(filepath.Join(dataDir, "images", "busybox.tar")); err != nil {
		return err
	}
	var warm *testenv.UpRun
	for i := range runs {
		if warm != nil {
			warm.Stop()
		}
		if warm, err = testenv.StartUp(ctx, bin, args); err != nil {
			return err
		}
		report("warm", i+1, warm)
		warms = append(warms, warm)
	}
	defer warm.Stop()
	summarize("cold", colds)
	summarize("warm", warms)
	fmt.Printf("memory after %v idle (PSS, MiB):\n", settle)
	time.Sleep(settle)
	printPSS(testenv.ClusterProcesses(dataDir), warm.Pid())

	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	kubectlIn := func(stdin string, args ...string) error {
		cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	kubectl := func(args ...string) error { return kubectlIn("", args...) }
	if load > 0 {
		start := time.Now()
		if err := kubectlIn(sleepers(load), "apply", "-f", "-"); err != nil {
			return err
		}
		if err := kubectl("-n", "default", "rollout", "status", "deployment/sleepers", "--timeout=600s"); err != nil {
			return err
		}
		fmt.Printf("memory with %d more pods (all Running after %.1fs), after %v idle (PSS, MiB):\n", load, time.Since(start).Seconds(), settle)
		time.Sleep(settle)
		printPSS(testenv.ClusterProcesses(dataDir), warm.Pid())
		if err := kubectl("-n", "default", "delete", "deployment", "sleepers", "--wait=true", "--timeout=300s"); err != nil {
			return err
		}
	}
	if replicas == 0 {
		return nil
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	for _, gated := range []bool{true, false} {
		ns := "plain"
		if gated {
			ns = "gated"
		}
		steps := [][]string{{"create", "namespace", ns}}
		if gated {
			steps = append(steps, []string{"label", "namespace", ns, "steadyplane.io/readiness-gates=on"})
		}
		steps = append(steps,
			[]string{"-n", ns, "create", "deployment", "web", "--image=" + testimage.BusyboxName, "--replicas=" + strconv.Itoa(replicas), "--port=8080", "--", "sh", "-c", "sleep 3; echo ok > index.html; exec httpd -f -p 8080"},
			[]string{"-n", ns, "patch", "deployment", "web", "-p", `{"spec":{"strategy":{"rollingUpdate":{"maxUnavailable":0,"maxSurge":1}}}}`},
			[]string{"-n", ns, "rollout", "status", "deployment/web", "--timeout=300s"})
		for _, s := range steps {
			if err := kubectl(s...); err != nil {
				return err
			}
		}
		// Wait until every pod serves before the rollout starts.
		sampler := &testenv.PassingSampler{}
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { sampler.Run(sctx, cs, ns, "app=web", replicas); close(done) }()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if _, n := sampler.Result(); n > 0 {
				break
			}
		}
		start := time.Now()
		err := kubectl("-n", ns, "set", "env", "deployment/web", "V=2")
		if err == nil {
			err = kubectl("-n", ns, "rollout", "status", "deployment/web", "--timeout=600s")
		}
		took := time.Since(start)
		stop()
		<-done
		if err != nil {
			return err
		}
		minimum, samples := sampler.Result()
		label := "without the gate"
		if gated {
			label = "with the gate   "
		}
		fmt.Printf("rollout of %d replicas %s: %.1fs, fewest pods passing an outside HTTP check %d of %d (%d samples every 100ms)\n",
			replicas, label, took.Seconds(), minimum, replicas, samples)
	}
	return nil
}

// report prints one start's figures.
func report(kind string, i int, u *testenv.UpRun) {
	fmt.Printf("up %s %d: API ready %.2fs (up says), %.2fs (/readyz from outside); all components ready %.1fs\n",
		kind, i, u.APIReady.Seconds(), u.APIReadyOutside.Seconds(), u.AllReady.Seconds())
}

// summarize prints the medians of runs: the API server ready, everything
// ready, and each progress line of up, in the order the first run printed
// them.
func summarize(kind string, runs []*testenv.UpRun) {
	med := func(f func(*testenv.UpRun) (time.Duration, bool)) (time.Duration, int) {
		var ds []time.Duration
		for _, r := range runs {
			if d, ok := f(r); ok {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			return 0, 0
		}
		slices.Sort(ds)
		return ds[len(ds)/2], len(ds)
	}
	outside, _ := med(func(r *testenv.UpRun) (time.Duration, bool) { return r.APIReadyOutside, r.APIReadyOutside > 0 })
	says, _ := med(func(r *testenv.UpRun) (time.Duration, bool) { return r.APIReady, true })
	all, _ := med(func(r *testenv.UpRun) (time.Duration, bool) { return r.AllReady, true })
	fmt.Printf("up %s, median of %d: API ready %.2fs from outside (%.2fs as up says), all components ready %.1fs; each step, from the start:\n",
		kind, len(runs), outside.Seconds(), says.Seconds(), all.Seconds())
	first, _ := med(func(r *testenv.UpRun) (time.Duration, bool) {
		if len(r.Steps) == 0 {
			return 0, false
		}
		return r.Steps[0].At, true
	})
	fmt.Printf("  %6.2fs  first line (up installed its binary and runs from it)\n", first.Seconds())
	for _, step := range runs[0].Steps {
		name := step.Name()
		if name == "" {
			continue
		}
		at, n := med(func(r *testenv.UpRun) (time.Duration, bool) {
			for _, s := range r.Steps {
				if s.Name() == name {
					return s.At, true
				}
			}
			return 0, false
		})
		fmt.Printf("  %6.2fs  %s", at.Seconds(), name)
		if n < len(runs) {
			fmt.Printf(" (in %d of %d runs)", n, len(runs))
		}
		fmt.Println()
	}
}

// printPSS prints the PSS of procs by name (conmon and containers summed,
// with their count), up's own apart, and the total.
func printPSS(procs []testenv.ClusterProcess, upPid int) {
	type sum struct {
		pss float64
		n   int
	}
	by := map[string]*sum{}
	var total float64
	for _, p := range procs {
		name := p.Name
		if p.Pid == upPid {
			name = "up"
		}
		if by[name] == nil {
			by[name] = &sum{}
		}
		pss := testenv.PSSMiB(p.Pid)
		by[name].pss += pss
		by[name].n++
		total += pss
	}
	names := slices.Collect(maps.Keys(by))
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(by[b].pss, by[a].pss) })
	for _, name := range names {
		if by[name].n > 1 {
			fmt.Printf("  %7.1f  %s (%d processes)\n", by[name].pss, name, by[name].n)
		} else {
			fmt.Printf("  %7.1f  %s\n", by[name].pss, name)
		}
	}
	fmt.Printf("  %7.1f  in all (%d processes)\n", total, len(procs))
}

// sleepers is a Deployment of n busybox pods that sleep, and stop at once.
func sleepers(n int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: sleepers, namespace: default}
spec:
  replicas: %d
  selector: {matchLabels: {app: sleepers}}
  template:
    metadata: {labels: {app: sleepers}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - {name: sleep, image: %q, imagePullPolicy: Never, command: [sleep, "86400"]}
`, n, testimage.BusyboxName)
}
