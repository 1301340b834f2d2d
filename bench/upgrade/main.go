// Command upgrade measures "steadyplane upgrade" on a "steadyplane up" on
// 127.0.0.1, with --pods busybox pods running throughout. Releases v0.9.1
// and v0.9.2 are built from this checkout with -ldflags, and a broken
// v0.9.3 whose up exits at start. Per round it moves the server to v0.9.2
// and back (--rollback), and prints for each move:
//
//   - how long the command took (the control plane on the new binary and
//     the API server's revision for it rolled out);
//   - a reader's view (client-go, a GET every 50ms): failed reads and the
//     longest gap between two answered ones;
//   - the pods' restarts and changed containers (goal: 0).
//
// Then the broken release: the time from the command to up's exit, and
// from up started again (as a service manager would) to the API server
// answering on the previous release.
//
//	sudo go run ./bench/upgrade [--runs 2] [--pods 10]
//	sudo go run ./bench/upgrade --servers 3 --workers 1   # a cluster (cluster.go)
//
// One server has nothing to fail over to, so its reader sees each restart
// whole; a cluster's reader fails over (the HA client).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/pkg/fallback/release"
)

func main() {
	runs := flag.Int("runs", 2, "rounds: each moves to the next release and back")
	pods := flag.Int("pods", 10, "busybox pods running through the upgrades")
	servers := flag.Int("servers", 1, "servers: more than one rolls releases over a cluster in network namespaces")
	workers := flag.Int("workers", 1, "workers of a cluster (with --servers above 1)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if *servers > 1 {
		err = runCluster(ctx, *servers, *workers, *pods)
	} else {
		err = run(ctx, max(*runs, 1), *pods)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// move is one upgrade's figures.
type move struct {
	took               time.Duration
	reads, failedReads int
	longestGap         time.Duration
	restarts, changed  int
}

func run(ctx context.Context, runs, pods int) error {
	fmt.Println("building releases v0.9.1, v0.9.2 and a broken v0.9.3 ...")
	v1, err := testenv.BinaryOfRelease("v0.9.1")
	if err != nil {
		return err
	}
	v2, err := testenv.BinaryOfRelease("v0.9.2")
	if err != nil {
		return err
	}
	info, err := release.DescribeBinary(ctx, v2)
	if err != nil {
		return err
	}
	broken, err := testenv.BrokenRelease("v0.9.3", info.Kubernetes)
	if err != nil {
		return err
	}
	b, err := testenv.NewBenchUp("upgrade", 243, "spu")
	if err != nil {
		return err
	}
	defer b.Cleanup()
	if err := testimage.BusyboxArchive(filepath.Join(b.DataDir, "images", "busybox.tar")); err != nil {
		return err
	}
	fmt.Println("starting up of v0.9.1 ...")
	up, err := testenv.StartUp(ctx, v1, b.Args)
	if err != nil {
		return err
	}
	defer func() { up.Stop() }()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(b.DataDir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	if err := runSleepers(ctx, cs, pods); err != nil {
		return err
	}
	upgrade := func(args ...string) error {
		cmd := exec.CommandContext(ctx, v1, append([]string{"upgrade", "--data-dir", b.DataDir}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("steadyplane upgrade %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	var moves []move
	for i := range runs {
		for _, step := range []struct {
			name string
			args []string
		}{{"v0.9.1 -> v0.9.2", []string{"--binary", v2}}, {"v0.9.2 -> v0.9.1 (--rollback)", []string{"--rollback"}}} {
			m, err := measure(ctx, cs, cfg, func() error { return upgrade(step.args...) })
			if err != nil {
				return err
			}
			fmt.Printf("round %d, %s: %.1fs; reads %d, failed %d, longest gap %.1fs; pods %d: restarts %d, containers changed %d\n",
				i+1, step.name, m.took.Seconds(), m.reads, m.failedReads, m.longestGap.Seconds(), pods, m.restarts, m.changed)
			moves = append(moves, m)
		}
	}
	med := func(f func(move) time.Duration) float64 {
		var ds []time.Duration
		for _, m := range moves {
			ds = append(ds, f(m))
		}
		slices.Sort(ds)
		return ds[len(ds)/2].Seconds()
	}
	total := func(f func(move) int) int {
		n := 0
		for _, m := range moves {
			n += f(m)
		}
		return n
	}
	fmt.Printf("median of %d moves: %.1fs, longest read gap %.1fs; in all: failed reads %d of %d, pod restarts %d, containers changed %d\n",
		len(moves), med(func(m move) time.Duration { return m.took }), med(func(m move) time.Duration { return m.longestGap }),
		total(func(m move) int { return m.failedReads }), total(func(m move) int { return m.reads }),
		total(func(m move) int { return m.restarts }), total(func(m move) int { return m.changed }))

	// The broken release: its up exits; started again, up runs v0.9.1.
	asked := time.Now()
	if err := upgrade("--binary", broken); err == nil {
		return fmt.Errorf("the move to the broken release did not fail")
	}
	failed := time.Since(asked)
	_ = up.Wait()
	restarted := time.Now()
	if up, err = testenv.StartUp(ctx, v1, b.Args); err != nil {
		return err
	}
	fmt.Printf("broken release: the command said it failed after %.1fs; up started again answered on v0.9.1 after %.1fs (API ready from outside %.1fs)\n",
		failed.Seconds(), time.Since(restarted).Seconds(), up.APIReadyOutside.Seconds())
	return nil
}

// measure runs do with the reader running and the pods' containers read
// before and after.
func measure(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, do func() error) (move, error) {
	before, err := containers(ctx, cs)
	if err != nil {
		return move{}, err
	}
	r := &reader{}
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.run(rctx, cfg) }()
	time.Sleep(time.Second) // the reader's first answers
	start := time.Now()
	if err := do(); err != nil {
		return move{}, err
	}
	m := move{took: time.Since(start)}
	time.Sleep(time.Second)
	stopReading()
	wg.Wait()
	m.reads, m.failedReads, m.longestGap = r.result()
	after, err := containers(ctx, cs)
	if err != nil {
		return move{}, err
	}
	for key, was := range before {
		now, ok := after[key]
		if !ok || now.id != was.id {
			m.changed++
		}
		if ok {
			m.restarts += int(now.restarts - was.restarts)
		}
	}
	return m, nil
}

// runSleepers runs n busybox pods (a Deployment) and waits until all run.
func runSleepers(ctx context.Context, cs kubernetes.Interface, n int) error {
	labels := map[string]string{"app": "sleepers"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "sleepers", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(n)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To(int64(1)),
				Containers:                    []corev1.Container{{Name: "sleep", Image: testimage.BusyboxName, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "86400"}}},
			}}},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		got, err := cs.AppsV1().Deployments("default").Get(ctx, "sleepers", metav1.GetOptions{})
		if err == nil && got.Status.ReadyReplicas == int32(n) {
			return nil
		}
	}
	return fmt.Errorf("%d sleepers not ready within 5 minutes", n)
}

// container is one running container as the API shows it.
type container struct {
	id       string
	restarts int32
}

// containers are the sleepers' containers, by pod.
func containers(ctx context.Context, cs kubernetes.Interface) (map[string]container, error) {
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=sleepers"})
	if err != nil {
		return nil, err
	}
	out := map[string]container{}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			out[p.Name] = container{id: s.ContainerID, restarts: s.RestartCount}
		}
	}
	return out, nil
}

// reader GETs the default namespace every 50ms, as a client-go client of
// the admin kubeconfig would.
type reader struct {
	mu            sync.Mutex
	reads, failed int
	lastOK        time.Time
	longest       time.Duration
}

func (r *reader) run(ctx context.Context, cfg *rest.Config) {
	c := rest.CopyConfig(cfg)
	c.Timeout = time.Second
	cs := kubernetes.NewForConfigOrDie(c)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		r.mu.Lock()
		r.reads++
		if err != nil {
			r.failed++
		} else {
			if !r.lastOK.IsZero() {
				r.longest = max(r.longest, now.Sub(r.lastOK))
			}
			r.lastOK = now
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (r *reader) result() (reads, failed int, longest time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads, r.failed, r.longest
}
