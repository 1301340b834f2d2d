package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/pkg/addons/metricsapi"
)

// nodePods is how many pods run on the node while its metrics endpoints
// are scraped for their cost (the "100 pods").
const nodePods = 100

// scrapes is how many times each endpoint is asked, back to back, to
// measure the node agent's cost.
const scrapes = 20

// firstMetrics polls, from start and beside the other figures, until the
// APIService is Available and until the node has metrics; wait returns
// both times since start.
func firstMetrics(ctx context.Context, cfg *rest.Config, start time.Time) (wait func() (available, top time.Duration, err error)) {
	agg := aggregator.NewForConfigOrDie(cfg)
	mc := metricsclient.NewForConfigOrDie(cfg)
	var available, top time.Duration
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if available, err = untilWithin(ctx, start, 3*time.Minute, "the metrics API Available", func() (bool, error) {
			ok, _ := metricsapi.Available(ctx, agg)
			return ok, nil
		}); err != nil {
			return
		}
		top, err = untilWithin(ctx, start, 3*time.Minute, "the node's metrics", func() (bool, error) {
			m, err := mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
			return err == nil && len(m.Items) > 0, nil
		})
	}()
	return func() (time.Duration, time.Duration, error) {
		<-done
		return available, top, err
	}
}

// metricsFigures measures the metrics API: how long after up is ready
// it is Available and kubectl top answers (first); how old the newest node
// sample is when asked (the figures' freshness); how long a new pod takes
// to appear; and, with nodePods pods on the node, what a scrape of
// /metrics/resource and of /stats/summary costs the node agent (CPU beyond
// its idle use) and takes.
func metricsFigures(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, dataDir string, first func() (time.Duration, time.Duration, error), runs int) error {
	mc := metricsclient.NewForConfigOrDie(cfg)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		return fmt.Errorf("want one node: %v", err)
	}
	node := nodes.Items[0].Name
	available, top, err := first()
	if err != nil {
		return err
	}
	var ages []time.Duration
	for range max(runs*2, 20) {
		m, err := mc.MetricsV1beta1().NodeMetricses().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ages = append(ages, time.Since(m.Timestamp.Time))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(1700 * time.Millisecond): // not a divisor of the resolution: the reads fall all over it
		}
	}
	var appeared []time.Duration
	pods := cs.CoreV1().Pods("default")
	for i := range min(runs, 3) {
		name := "measured-" + strconv.Itoa(i)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "c", Image: testimage.BusyboxName, Command: []string{"sleep", "3600"}}}}}
		start := time.Now()
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return err
		}
		d, err := untilWithin(ctx, start, 2*time.Minute, "the pod's metrics", func() (bool, error) {
			_, err := mc.MetricsV1beta1().PodMetricses("default").Get(ctx, name, metav1.GetOptions{})
			return err == nil, nil
		})
		if err != nil {
			return err
		}
		appeared = append(appeared, d)
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	fmt.Printf("metrics API (metrics-server every %s):\n", metricsapi.Resolution)
	fmt.Printf("  %-52s %6.2fs\n", "up ready → APIService Available (polled every 20ms)", available.Seconds())
	fmt.Printf("  %-52s %6.2fs\n", "up ready → kubectl top node answers", top.Seconds())
	line(fmt.Sprintf("age of the newest node sample (%d reads)", len(ages)), ages)
	line(fmt.Sprintf("pod created → in kubectl top pod (%d pods)", len(appeared)), appeared)
	return scrapeCost(ctx, cs, dataDir, node)
}

// scrapeCost fills the node with nodePods pods and measures its two
// metrics endpoints, through the API server's node proxy as metrics-server
// and kubectl reach them.
func scrapeCost(ctx context.Context, cs kubernetes.Interface, dataDir, node string) error {
	all, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return err
	}
	replicas := int32(nodePods - len(all.Items))
	labels := map[string]string{"app": "many"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "many"}, Spec: appsv1.DeploymentSpec{Replicas: &replicas,
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "c", Image: testimage.BusyboxName, Command: []string{"sleep", "3600"}}}}}}}
	deployments := cs.AppsV1().Deployments("default")
	if _, err := deployments.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() {
		if err := deployments.Delete(context.Background(), "many", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			fmt.Println("deleting the pods:", err)
		}
	}()
	if _, err := untilWithin(ctx, time.Now(), 5*time.Minute, fmt.Sprintf("%d pods running", nodePods), func() (bool, error) {
		d, err := deployments.Get(ctx, "many", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == replicas, err
	}); err != nil {
		return err
	}
	agent := 0
	for _, p := range testenv.ClusterProcesses(dataDir) {
		if p.Name == "node" {
			agent = p.Pid
		}
	}
	if agent == 0 {
		return fmt.Errorf("no node agent process of %s", dataDir)
	}
	// The agent's own use meanwhile (its pods' probes, status, metrics-
	// server's scrapes), taken off what the scrapes cost.
	const idle = 10 * time.Second
	c0 := testenv.CPUSeconds(agent)
	time.Sleep(idle)
	idleRate := (testenv.CPUSeconds(agent) - c0) / idle.Seconds()
	fmt.Printf("node agent with %d pods (%d scrapes of each, back to back, through the API server's node proxy; agent idle %.1f%% of a core):\n", nodePods, scrapes, idleRate*100)
	for _, path := range []string{"/metrics/resource", "/stats/summary"} {
		var took []time.Duration
		size := 0
		start, c0 := time.Now(), testenv.CPUSeconds(agent)
		for range scrapes {
			t := time.Now()
			b, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + node + "/proxy" + path).DoRaw(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			took, size = append(took, time.Since(t)), len(b)
		}
		cost := (testenv.CPUSeconds(agent) - c0 - idleRate*time.Since(start).Seconds()) / scrapes
		fmt.Printf("  %-20s %6.1f KiB  median %6.1fms  worst %6.1fms  agent CPU %5.1fms a scrape\n", path, float64(size)/1024,
			float64(testenv.Median(took).Microseconds())/1000, float64(slices.Max(took).Microseconds())/1000, cost*1000)
	}
	return nil
}
