// Command readiness measures Pod Ready++ on a real control plane and node
// agent (all on 127.0.0.1):
//
//   - the time from a readiness gate condition's PATCH to Ready=True seen
//     through a watch, for --pods pods one after another (median, p90, worst);
//
//   - the node agent's CPU and memory, idle and while it runs --load pods, each
//     with an exec readiness probe every 10s.
//
//     go run ./bench/readiness [--pods 50] [--load 100] [--sample 30s]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/controlplane"
)

const gate = "example.com/bench"

func main() {
	pods := flag.Int("pods", 50, "pods whose gate latency is measured")
	load := flag.Int("load", 100, "pods run while the agent's cost is sampled")
	sample := flag.Duration("sample", 30*time.Second, "length of each CPU sample")
	flag.Parse()
	if err := run(*pods, *load, *sample); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(n, load int, sample time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Println("starting etcd, apiserver and the node agent on 127.0.0.1...")
	cp, stopCluster, err := testenv.StartTempControlPlane(ctx, nil)
	if err != nil {
		return err
	}
	defer stopCluster()
	nodeName := controlplane.NewOptions().NodeName
	if err := cp.Node.Start(); err != nil {
		return err
	}
	if err := cp.WaitNodeReady(ctx); err != nil {
		return err
	}
	cfg, _ := cp.AdminConfig()
	cfg.QPS, cfg.Burst = 200, 400
	cs := kubernetes.NewForConfigOrDie(cfg)
	pods := cs.CoreV1().Pods("default")

	idleCPU, idleRSS := testenv.ProcessCost(cp.Node.Pid(), sample/3)
	fmt.Printf("agent idle: %.2f%% of a core, %.1f MiB RSS\n", idleCPU, idleRSS)

	// Gate latency.
	for i := 0; i < n; i++ {
		p := pod(fmt.Sprintf("gate-%d", i), "gate", nodeName, nil)
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := waitAll(ctx, cs, "bench=gate", n, corev1.ContainersReady); err != nil {
		return err
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "bench=gate"})
	if err != nil {
		return err
	}
	defer w.Stop()
	var took []time.Duration
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("gate-%d", i)
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{Type: gate, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}})
		start := time.Now()
		if _, err := pods.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			return err
		}
		if err := waitEvent(ctx, w.ResultChan(), name, corev1.PodReady); err != nil {
			return err
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	fmt.Printf("gate PATCH -> Ready=True via watch, %d pods: median %v, p90 %v, worst %v\n", n,
		took[n/2].Round(100*time.Microsecond), took[n*9/10].Round(100*time.Microsecond), took[n-1].Round(100*time.Microsecond))

	// Agent cost with load pods, each with an exec readiness probe.
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 10}
	for i := 0; i < load-n; i++ {
		if _, err := pods.Create(ctx, pod(fmt.Sprintf("load-%d", i), "load", nodeName, probe), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := waitAll(ctx, cs, "bench=load", load-n, corev1.PodReady); err != nil {
		return err
	}
	cpu, rss := testenv.ProcessCost(cp.Node.Pid(), sample)
	fmt.Printf("agent with %d pods (%d with an exec probe every 10s): %.2f%% of a core (probe processes included), %.1f MiB RSS\n", load, load-n, cpu, rss)
	return nil
}

func pod(name, group, node string, readiness *corev1.Probe) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": group}},
		Spec: corev1.PodSpec{RuntimeClassName: testenv.HostRoot(), NodeName: node, TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{
			Name: "c", Image: "local", Command: []string{"sleep", "3600"}, ReadinessProbe: readiness,
		}}},
	}
}

func waitAll(ctx context.Context, cs kubernetes.Interface, selector string, n int, cond corev1.PodConditionType) error {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		ready := 0
		for i := range l.Items {
			if isTrue(&l.Items[i], cond) {
				ready++
			}
		}
		if ready == n {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("pods %s not all %s within 5 minutes", selector, cond)
}

func waitEvent(ctx context.Context, ch <-chan watch.Event, name string, cond corev1.PodConditionType) error {
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return fmt.Errorf("watch closed")
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Name == name && isTrue(p, cond) {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("%s not %s within a minute", name, cond)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func isTrue(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
