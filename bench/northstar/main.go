// Command northstar measures issue 23's north star on three servers that
// "up" made and joined, each in a network namespace of its own, with no load
// balancer: while the KubeAPIServer operator rolls a good revision, then a
// bad one (it must stop at the first node, which falls back), then a fix,
// a client-go workload and "steadyplane kubectl" run throughout, all
// through the first server's admin kubeconfig:
//
//   - a reader: a GET every 100ms;
//   - an informer: list and watch of the workload's ConfigMaps;
//   - a writer: creates a ConfigMap, then updates it, one after the other;
//   - "steadyplane kubectl get -w" of the same ConfigMaps, and an apply loop
//     of one ConfigMap every second.
//
// It prints failed reads, failed writes, duplicated writes (a create that
// found its object there, an update that found another version: the client
// sent it twice), watch events lost (a write the informer or kubectl never
// saw), the longest gap the reader saw, and each rollout's duration. The
// goal: 0, 0, 0, 0 and a gap under 1s.
//
//	sudo go run ./bench/northstar
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
)

func main() {
	settle := flag.Duration("settle", 5*time.Second, "workload before the first rollout and after the last")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// clusterCIDR is the pods' range of the three servers; it must be unused
// on the machine.
const clusterCIDR = "10.217.0.0/16"

func run(ctx context.Context, settle time.Duration) error {
	if err := testenv.CanMakeNetwork(); err != nil {
		return err
	}
	bin, err := testenv.Binary()
	if err != nil {
		return err
	}
	nw, err := testenv.NewNetwork(3)
	if err != nil {
		return err
	}
	defer nw.Close()
	work, err := os.MkdirTemp("", "steadyplane-bench-northstar-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	resolv := filepath.Join(work, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("# no nameserver: nothing resolved off the machine\n"), 0o644); err != nil {
		return err
	}
	names := []string{"s0", "s1", "s2"}
	dataDir := func(i int) string { return filepath.Join(work, names[i], "sp") }
	url := "https://" + nw.Hosts[0].IP.String() + ":6443"
	var ups []*testenv.UpRun
	defer func() {
		for i := len(ups) - 1; i >= 0; i-- {
			ups[i].Stop()
		}
		for i := range names {
			testenv.CleanNode(filepath.Join(dataDir(i), "node"))
			name, args := nw.NSEnter(i, names[i], bin, "cleanup", "--data-dir", dataDir(i))
			_ = exec.Command(name, args...).Run()
		}
	}()
	for i := range names {
		args := []string{"up", "--data-dir", dataDir(i), "--bind-address", nw.Hosts[i].IP.String(), "--node-name", names[i],
			"--runtime", "runc", "--resolv-conf", resolv, "--cluster-cidr", clusterCIDR, "--pod-cidr", "10.217.0.0/24", "--dns=false"}
		if i > 0 {
			args = append(args, "--server", url, "--token-file", filepath.Join(dataDir(0), "token"))
		}
		fmt.Printf("starting server %s (%s) ...\n", names[i], nw.Hosts[i].IP)
		name, nsArgs := nw.NSEnter(i, names[i], bin, args...)
		up, err := testenv.StartUp(ctx, name, nsArgs)
		if err != nil {
			return fmt.Errorf("server %s: %w (its log: %s)", names[i], err, filepath.Join(dataDir(i), "logs"))
		}
		ups = append(ups, up)
		fmt.Printf("  up in %.1fs\n", up.AllReady.Seconds())
	}
	kubeconfig := filepath.Join(dataDir(0), "admin.kubeconfig")
	// One client configuration for the workload and the rollouts: the
	// admin kubeconfig, with every server as an alternative.
	cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{})
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	w, err := startWorkload(ctx, bin, kubeconfig, cfg)
	if err != nil {
		return err
	}
	defer w.close()
	r, err := newRollouts(cfg, names)
	if err != nil {
		return err
	}
	if err := r.waitSettled(ctx); err != nil {
		return err
	}
	fmt.Printf("workload running; rollouts start in %v\n", settle)
	time.Sleep(settle)
	var results []string
	for _, step := range []struct {
		what, spec string
		bad        bool
	}{
		{"good revision", `{"spec":{"extraArgs":["--max-requests-inflight=500"]}}`, false},
		{"bad revision (unknown flag)", `{"spec":{"extraArgs":["--no-such-flag"]}}`, true},
		{"fixed spec", `{"spec":{"extraArgs":["--max-requests-inflight=501"]}}`, false},
	} {
		fmt.Printf("rolling out the %s ...\n", step.what)
		d, detail, err := r.roll(ctx, step.spec, step.bad)
		if err != nil {
			return fmt.Errorf("%s: %w", step.what, err)
		}
		results = append(results, fmt.Sprintf("  %-28s %6.1fs  %s", step.what, d.Seconds(), detail))
		fmt.Println(results[len(results)-1])
	}
	time.Sleep(settle)
	res := w.stop(ctx)

	fmt.Println()
	fmt.Println("north star: three servers, no load balancer, a good, a bad and a fixed revision")
	fmt.Println("rollouts:")
	fmt.Println(strings.Join(results, "\n"))
	fmt.Println("throughout (goal: 0, 0, 0, 0, gap < 1s):")
	fmt.Printf("  failed reads            %d of %d\n", res.failedReads, res.reads)
	fmt.Printf("  failed writes           %d of %d (client-go %d, kubectl apply %d of %d)\n", res.failedWrites+res.failedApplies, res.writes+res.applies, res.failedWrites, res.failedApplies, res.applies)
	fmt.Printf("  duplicated writes       %d\n", res.duplicated)
	fmt.Printf("  lost watch events       %d (informer %d, kubectl get -w %d, of %d writes)\n", res.lostInformer+res.lostKubectl, res.lostInformer, res.lostKubectl, res.writes-res.failedWrites)
	fmt.Printf("  longest reader gap      %v\n", res.gap.Round(time.Millisecond))
	if res.kubectlErr != "" {
		fmt.Printf("  kubectl get -w          %s\n", res.kubectlErr)
	}
	return nil
}
