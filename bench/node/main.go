// Command node measures the node agent on a real control plane (all on
// 127.0.0.1), for each runtime this machine has, in one run:
//
//   - pod start latency: --pods pods created at once, the time from each
//     Create to Running seen through a watch (median, p90, worst, all);
//
//   - the agent's CPU and RSS idle and with --load pods running (and, under
//     runc, the memory of the per-container monitors, conmon);
//
//   - under runc, pods from images: the time from Create to Running for an
//     image pulled from a registry on 127.0.0.1 (a new image each, --pulls
//     times) and for --pods pods of an image already in the store, created
//     at once, with the memory of their monitors beside it;
//
//   - CNI setup and teardown of one pod network, --cycles times.
//
// Runtimes and CNI need root, runc and the CNI plugins for the runc figures;
// without them only the process figures are printed.
//
//	sudo go run ./bench/node [--pods 30] [--load 100] [--sample 20s] [--cycles 30]
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/pkg/controlplane"
	"github.com/steadyplane/steadyplane/pkg/node/podnet"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
)

func main() {
	pods := flag.Int("pods", 30, "pods created at once whose start latency is measured")
	load := flag.Int("load", 100, "pods running while the agent's cost is sampled")
	sample := flag.Duration("sample", 20*time.Second, "length of each CPU sample")
	cycles := flag.Int("cycles", 30, "CNI setup/teardown cycles")
	pulls := flag.Int("pulls", 5, "pods whose image is pulled, one at a time")
	only := flag.String("only", "", "measure only these parts, comma-separated: process, runc, images, cni (default: all)")
	flag.Parse()
	part := func(name string) bool { return *only == "" || slices.Contains(strings.Split(*only, ","), name) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var runtimes []string
	if part("process") {
		runtimes = append(runtimes, "process")
	}
	_, runcErr := runc.Available()
	if runcErr != nil {
		fmt.Printf("runc figures skipped: %v\n", runcErr)
	} else if part("runc") {
		runtimes = append(runtimes, "runc")
	}
	medians := map[string]time.Duration{}
	for _, rt := range runtimes {
		m, err := measureRuntime(ctx, rt, *pods, *load, *sample)
		if err != nil {
			fmt.Fprintf(os.Stderr, "error (%s): %v\n", rt, err)
			os.Exit(1)
		}
		medians[rt] = m
	}
	if p, r := medians["process"], medians["runc"]; p > 0 && r > 0 {
		fmt.Printf("pod start, median runc / process: %.2fx\n", float64(r)/float64(p))
	}
	if runcErr != nil {
		return
	}
	if part("images") {
		if err := measureImages(ctx, *pods, *pulls); err != nil {
			fmt.Fprintln(os.Stderr, "error (images):", err)
			os.Exit(1)
		}
	}
	if part("cni") {
		if err := measureCNI(ctx, *cycles); err != nil {
			fmt.Fprintln(os.Stderr, "error (cni):", err)
			os.Exit(1)
		}
	}
}

func measureRuntime(ctx context.Context, rt string, n, load int, sample time.Duration) (time.Duration, error) {
	fmt.Printf("[%s] starting etcd, apiserver and the node agent on 127.0.0.1...\n", rt)
	cp, stopCluster, err := testenv.StartTempControlPlane(ctx, nil, func(o *controlplane.Options) { o.NodeRuntime = rt })
	if err != nil {
		return 0, err
	}
	defer stopCluster()
	if err := cp.Node.Start(); err != nil {
		return 0, err
	}
	if err := cp.WaitNodeReady(ctx); err != nil {
		return 0, err
	}
	nodeName := controlplane.NewOptions().NodeName
	cfg, _ := cp.AdminConfig()
	cfg.QPS, cfg.Burst = 200, 400
	cs := kubernetes.NewForConfigOrDie(cfg)
	pods := cs.CoreV1().Pods("default")

	cpu, rss := testenv.ProcessCost(cp.Node.Pid(), sample/2)
	fmt.Printf("[%s] agent idle: %.2f%% of a core, %.1f MiB RSS (%.1f MiB private, %.1f MiB PSS)\n", rt, cpu, rss, testenv.PrivateMiB(cp.Node.Pid()), testenv.PSSMiB(cp.Node.Pid()))

	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "bench=start"})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	created := map[string]time.Time{}
	first := time.Now()
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("start-%d", i)
		created[name] = time.Now()
		if _, err := pods.Create(ctx, pod(name, "start", nodeName), metav1.CreateOptions{}); err != nil {
			return 0, err
		}
	}
	var took []time.Duration
	seen := map[types.UID]bool{}
	timeout := time.After(5 * time.Minute)
	for len(took) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, fmt.Errorf("watch closed")
			}
			p, ok := ev.Object.(*corev1.Pod)
			if ok && p.Status.Phase == corev1.PodRunning && !seen[p.UID] {
				seen[p.UID] = true
				took = append(took, time.Since(created[p.Name]))
			}
		case <-timeout:
			return 0, fmt.Errorf("%d of %d pods Running after 5 minutes", len(took), n)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	all := time.Since(first)
	slices.Sort(took)
	fmt.Printf("[%s] pod start (Create -> Running via watch), %d pods created at once: median %v, p90 %v, worst %v; all Running after %v\n",
		rt, n, took[n/2].Round(time.Millisecond), took[n*9/10].Round(time.Millisecond), took[n-1].Round(time.Millisecond), all.Round(time.Millisecond))

	for i := n; i < load; i++ {
		if _, err := pods.Create(ctx, pod(fmt.Sprintf("load-%d", i), "load", nodeName), metav1.CreateOptions{}); err != nil {
			return 0, err
		}
	}
	if err := waitRunning(ctx, cs, load); err != nil {
		return 0, err
	}
	cpu, rss = testenv.ProcessCost(cp.Node.Pid(), sample)
	fmt.Printf("[%s] agent with %d pods: %.2f%% of a core, %.1f MiB RSS (%.1f MiB private, %.1f MiB PSS)", rt, load, cpu, rss, testenv.PrivateMiB(cp.Node.Pid()), testenv.PSSMiB(cp.Node.Pid()))
	if rt == "runc" {
		n, private, pss := monitorsMemory()
		fmt.Printf("; %d container monitors (conmon): %.2f MiB private, %.2f MiB PSS each", n, private/float64(max(n, 1)), pss/float64(max(n, 1)))
	}
	fmt.Println()
	// Pods stop with grace 0, so the cluster's stop is quick.
	return took[n/2], nil
}

func pod(name, group, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": group}},
		Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), NodeName: node, TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{
			Name: "c", Image: "local", Command: []string{"sleep", "3600"},
		}}},
	}
}

func waitRunning(ctx context.Context, cs kubernetes.Interface, n int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := 0
		for i := range l.Items {
			if l.Items[i].Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running == n {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("not %d pods Running within 5 minutes", n)
}

// measureImages measures pods from images under runc: pulls pods whose image
// is pulled from a registry on 127.0.0.1 one at a time, then n pods at once
// of an image already in the store.
func measureImages(ctx context.Context, n, pulls int) error {
	fmt.Println("[images] starting etcd, apiserver and the node agent (runc) on 127.0.0.1...")
	cp, stopCluster, err := testenv.StartTempControlPlane(ctx, nil, func(o *controlplane.Options) { o.NodeRuntime = "runc" })
	if err != nil {
		return err
	}
	defer stopCluster()
	if err := cp.Node.Start(); err != nil {
		return err
	}
	if err := cp.WaitNodeReady(ctx); err != nil {
		return err
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	busybox, err := testimage.Busybox()
	if err != nil {
		return err
	}
	nodeName := controlplane.NewOptions().NodeName
	cfg, _ := cp.AdminConfig()
	cfg.QPS, cfg.Burst = 200, 400
	cs := kubernetes.NewForConfigOrDie(cfg)
	pods := cs.CoreV1().Pods("default")
	imagePod := func(name, group, image string) *corev1.Pod {
		p := pod(name, group, nodeName)
		p.Spec.RuntimeClassName = nil
		p.Spec.Containers[0].Image, p.Spec.Containers[0].ImagePullPolicy = image, corev1.PullIfNotPresent
		return p
	}

	// A new image for each pull: busybox under a layer of 4 MiB of its own.
	var pulled []time.Duration
	for i := 0; i < pulls; i++ {
		noise := make([]byte, 4<<20)
		_, _ = rand.Read(noise)
		layer, err := testimage.Layer([]testimage.File{{Name: "noise", Mode: 0o644, Body: noise}})
		if err != nil {
			return err
		}
		img, err := mutate.AppendLayers(busybox, layer)
		if err != nil {
			return err
		}
		ref := fmt.Sprintf("%s/bench/busybox:%d", host, i)
		if err := testimage.Push(ref, img, nil); err != nil {
			return err
		}
		took, err := timeToRunning(ctx, cs, []*corev1.Pod{imagePod(fmt.Sprintf("pull-%d", i), "pull", ref)})
		if err != nil {
			return err
		}
		pulled = append(pulled, took[0])
	}
	slices.Sort(pulled)
	fmt.Printf("[images] pod start with a pull (busybox and 4 MiB of its own from 127.0.0.1), %d pods one at a time: median %v, worst %v\n",
		pulls, pulled[len(pulled)/2].Round(time.Millisecond), pulled[len(pulled)-1].Round(time.Millisecond))

	// The image of the first pull is in the store now.
	inStore := fmt.Sprintf("%s/bench/busybox:0", host)
	var batch []*corev1.Pod
	for i := 0; i < n; i++ {
		batch = append(batch, imagePod(fmt.Sprintf("stored-%d", i), "stored", inStore))
	}
	took, err := timeToRunning(ctx, cs, batch)
	if err != nil {
		return err
	}
	slices.Sort(took)
	mons, private, pss := monitorsMemory()
	fmt.Printf("[images] pod start with the image in the store, %d pods created at once: median %v, p90 %v, worst %v; %d container monitors (conmon): %.2f MiB private, %.2f MiB PSS each\n",
		n, took[n/2].Round(time.Millisecond), took[n*9/10].Round(time.Millisecond), took[n-1].Round(time.Millisecond), mons, private/float64(max(mons, 1)), pss/float64(max(mons, 1)))
	return pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
}

// timeToRunning creates ps at once and returns, for each, the time from its
// Create to Running seen through a watch.
func timeToRunning(ctx context.Context, cs kubernetes.Interface, ps []*corev1.Pod) ([]time.Duration, error) {
	pods := cs.CoreV1().Pods("default")
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "bench=" + ps[0].Labels["bench"]})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	created := map[string]time.Time{}
	for _, p := range ps {
		created[p.Name] = time.Now()
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	var took []time.Duration
	seen := map[string]bool{}
	timeout := time.After(5 * time.Minute)
	for len(took) < len(ps) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("watch closed")
			}
			p, ok := ev.Object.(*corev1.Pod)
			if ok && p.Status.Phase == corev1.PodRunning && !seen[p.Name] {
				if _, ours := created[p.Name]; ours {
					seen[p.Name] = true
					took = append(took, time.Since(created[p.Name]))
				}
			}
		case <-timeout:
			return nil, fmt.Errorf("%d of %d pods Running after 5 minutes", len(took), len(ps))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return took, nil
}

// monitorsMemory counts the container monitors (conmon) and sums their
// private memory and their PSS.
func monitorsMemory() (n int, private, pss float64) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(b)) != "conmon" {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err == nil {
			n++
			private += testenv.PrivateMiB(pid)
			pss += testenv.PSSMiB(pid)
		}
	}
	return n, private, pss
}

// measureCNI times the pod network alone: a sandbox's pinned network
// namespace, CNI ADD (bridge, host-local, portmap, loopback) and DEL.
func measureCNI(ctx context.Context, cycles int) error {
	dir, err := os.MkdirTemp("", "steadyplane-bench-cni-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bridge := fmt.Sprintf("spb%d", os.Getpid()%100000)
	defer func() { _ = exec.Command("ip", "link", "del", bridge).Run() }()
	cfg := podnet.Config{PodCIDR: "10.247.0.0/24", Bridge: bridge, IPAMDir: filepath.Join(dir, "ipam"), NAT: podnet.IPTablesAvailable()}
	network, err := podnet.New(cfg, filepath.Join(dir, "net.conflist"), filepath.Join(dir, "cache"))
	if err != nil {
		return err
	}
	// Sandboxes only: no container starts, so the exit hook is never run.
	rt, err := runc.New(runc.Options{Root: filepath.Join(dir, "runc"), ExitHook: []string{"unused"}})
	if err != nil {
		return err
	}
	var setups, teardowns []time.Duration
	for i := 0; i < cycles; i++ {
		id := fmt.Sprintf("bench-%d", i)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: "default", UID: types.UID(id)}}
		sb, err := rt.CreateSandbox(id, filepath.Join(dir, id), id, false)
		if err != nil {
			return err
		}
		start := time.Now()
		if _, err := network.Setup(ctx, p, id, sb.NetNS); err != nil {
			return err
		}
		setups = append(setups, time.Since(start))
		start = time.Now()
		if err := network.Teardown(ctx, p, id, sb.NetNS); err != nil {
			return err
		}
		teardowns = append(teardowns, time.Since(start))
		if err := rt.RemoveSandbox(sb); err != nil {
			return err
		}
	}
	slices.Sort(setups)
	slices.Sort(teardowns)
	fmt.Printf("[cni] %d cycles: setup median %v (p90 %v), teardown median %v (p90 %v)\n", cycles,
		setups[cycles/2].Round(100*time.Microsecond), setups[cycles*9/10].Round(100*time.Microsecond),
		teardowns[cycles/2].Round(100*time.Microsecond), teardowns[cycles*9/10].Round(100*time.Microsecond))
	return nil
}
