// Command fallback measures the static-pod fallback on a whole "steadyplane
// up" on 127.0.0.1, in one run: for each kind of bad rollout, the API outage
// from the spec change to the API server answering again (on the previous
// revision), and the time until the operator records the fallback; and the
// outage of the good rollout that repairs it. Median and worst per kind over
// --runs rounds.
//
//	sudo go run ./bench/fallback [--runs 3] [--timeout 20s]
//
// A crash loop and a manifest the node agent refuses are judged at once; an
// unhealthy etcd and a server that never becomes ready are judged after
// --timeout (the startup monitor's ready timeout), which bounds their outage.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/internal/outage"
	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
)

func main() {
	runs := flag.Int("runs", 3, "rounds of every kind of bad rollout")
	timeout := flag.Duration("timeout", 20*time.Second, "the startup monitor's ready timeout (up's --fallback-timeout)")
	only := flag.String("only", "", "comma-separated reasons to measure (CrashLooping, NeverStartedUp, EtcdUnhealthy, NotReady); empty for all")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *runs, *timeout, *only); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// badRollout is one kind of bad change and how to undo what is not spec.
type badRollout struct {
	reason string
	spec   string
	breaks func(context.Context) error
	fix    func(context.Context) error
}

// sample is one bad rollout's figures and its repair's outage.
type sample struct {
	outage, recorded, repair time.Duration
}

func run(ctx context.Context, runs int, timeout time.Duration, only string) error {
	bin, err := testenv.Binary()
	if err != nil {
		return err
	}
	// No retries during the run: each bad rollout is judged once.
	b, err := testenv.NewBenchUp("fallback", 247, "spf", "--fallback-timeout="+timeout.String(), "--fallback-retry-base=6h", "--fallback-retry-max=6h",
		// One kube-proxy per machine (its nftables table is the host's): the
		// fallback needs none.
		"--proxy=false")
	if err != nil {
		return err
	}
	defer b.Cleanup()
	dataDir, args := b.DataDir, b.Args
	fmt.Println("starting steadyplane up ...")
	up, err := testenv.StartUp(ctx, bin, args)
	if err != nil {
		return err
	}
	defer up.Stop()

	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	cfg.Timeout = 5 * time.Second
	cs := kubernetes.NewForConfigOrDie(cfg)
	api := v1alpha1.Client{Dynamic: dynamic.NewForConfigOrDie(cfg)}
	patch := func(ctx context.Context, spec string) error {
		_, err := api.Dynamic.Resource(v1alpha1.GroupVersionResource).Patch(ctx, v1alpha1.Name, types.MergePatchType, []byte(spec), metav1.PatchOptions{})
		return err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		return fmt.Errorf("the benchmark's cluster should have one node: %v", err)
	}
	templatesName := operator.TemplatesName(nodes.Items[0].Name)
	templates, err := cs.CoreV1().ConfigMaps(v1alpha1.Namespace).Get(ctx, templatesName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	goodOperand := templates.Data[operator.OperandKey]
	const containerName = "\n    name: kube-apiserver\n"
	if !strings.Contains(goodOperand, containerName) {
		return fmt.Errorf("the operand template has no container name to break")
	}
	setOperand := func(ctx context.Context, data string) error {
		cm, err := cs.CoreV1().ConfigMaps(v1alpha1.Namespace).Get(ctx, templatesName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cm.Data[operator.OperandKey] = data
		_, err = cs.CoreV1().ConfigMaps(v1alpha1.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	}
	kinds := []badRollout{
		{reason: "CrashLooping", spec: `{"spec":{"extraArgs":["--no-such-flag"]}}`},
		{reason: "NeverStartedUp", breaks: func(ctx context.Context) error {
			// A container name the pod validation refuses: the node agent cannot run the manifest.
			return setOperand(ctx, strings.Replace(goodOperand, containerName, "\n    name: kube_apiserver\n", 1))
		}, fix: func(ctx context.Context) error { return setOperand(ctx, goodOperand) }},
		// Not a second --etcd-servers: the flag is a list, and a second one adds a server.
		{reason: "EtcdUnhealthy", spec: fmt.Sprintf(`{"spec":{"extraArgs":["--etcd-cafile=%s"]}}`, filepath.Join(dataDir, "pki", "ca.crt"))},
		{reason: "NotReady", spec: `{"spec":{"extraArgs":["--test-unfinished-post-start-hook"]}}`},
	}
	if only != "" {
		kinds = slices.DeleteFunc(kinds, func(k badRollout) bool { return !slices.Contains(strings.Split(only, ","), k.reason) })
		if len(kinds) == 0 {
			return fmt.Errorf("-only=%s: no such reason", only)
		}
	}
	results := map[string][]sample{}
	good := 0
	for round := 1; round <= runs; round++ {
		for _, k := range kinds {
			before, err := api.Get(ctx, v1alpha1.Name)
			if err != nil {
				return err
			}
			failed := nodeStatus(before).LastFailedRevision
			start := time.Now()
			watch := outage.Watch(ctx, cfg)
			if k.breaks != nil {
				err = k.breaks(ctx)
			} else {
				err = patch(ctx, k.spec)
			}
			if err != nil {
				return err
			}
			obj, err := waitFor(ctx, api, 5*time.Minute, func(o *v1alpha1.KubeAPIServer) bool { return nodeStatus(o).LastFailedRevision > failed })
			if err != nil {
				return fmt.Errorf("%s, round %d: no fallback: %w", k.reason, round, err)
			}
			s := sample{recorded: time.Since(start), outage: watch()}
			if got := nodeStatus(obj).LastFailedReason; got != k.reason {
				return fmt.Errorf("%s, round %d: the fallback's reason is %s", k.reason, round, got)
			}
			// Repair with a good change: a new revision that rolls out.
			if k.fix != nil {
				if err := k.fix(ctx); err != nil {
					return err
				}
			}
			good++
			watch = outage.Watch(ctx, cfg)
			if err := patch(ctx, fmt.Sprintf(`{"spec":{"extraArgs":["--max-requests-inflight=%d"]}}`, 400+good)); err != nil {
				return err
			}
			if _, err := waitFor(ctx, api, 5*time.Minute, func(o *v1alpha1.KubeAPIServer) bool {
				ns := nodeStatus(o)
				return ns.TargetRevision == 0 && ns.CurrentRevision == o.Status.LatestAvailableRevision && ns.LastFailedRevision < ns.CurrentRevision
			}); err != nil {
				return fmt.Errorf("%s, round %d: the repair did not roll out: %w", k.reason, round, err)
			}
			s.repair = watch()
			results[k.reason] = append(results[k.reason], s)
			fmt.Printf("round %d %-15s outage %5.1fs, fallback recorded after %5.1fs; repair outage %4.1fs\n",
				round, k.reason, s.outage.Seconds(), s.recorded.Seconds(), s.repair.Seconds())
		}
	}
	fmt.Printf("\nAPI outage per bad rollout (spec change to the API answering again), %d runs each, ready timeout %v:\n", runs, timeout)
	var repairs []time.Duration
	for _, k := range kinds {
		var out, rec []time.Duration
		for _, s := range results[k.reason] {
			out, rec = append(out, s.outage), append(rec, s.recorded)
			repairs = append(repairs, s.repair)
		}
		fmt.Printf("  %-15s median %5.1fs worst %5.1fs   (fallback recorded: median %5.1fs worst %5.1fs)\n",
			k.reason, testenv.Median(out).Seconds(), slices.Max(out).Seconds(), testenv.Median(rec).Seconds(), slices.Max(rec).Seconds())
	}
	fmt.Printf("  %-15s median %5.1fs worst %5.1fs   (%d good rollouts)\n", "good rollout", testenv.Median(repairs).Seconds(), slices.Max(repairs).Seconds(), len(repairs))
	return nil
}

func nodeStatus(o *v1alpha1.KubeAPIServer) v1alpha1.NodeStatus {
	if len(o.Status.NodeStatuses) == 0 {
		return v1alpha1.NodeStatus{}
	}
	return o.Status.NodeStatuses[0]
}

// waitFor polls the KubeAPIServer (through outages) every 200ms until ok.
func waitFor(ctx context.Context, api v1alpha1.Client, timeout time.Duration, ok func(*v1alpha1.KubeAPIServer) bool) (*v1alpha1.KubeAPIServer, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if obj, err := api.Get(ctx, v1alpha1.Name); err == nil && ok(obj) {
			return obj, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
