// Command services measures Services and DNS on a "steadyplane up" of its
// own, in one run:
//
//   - the proxy's sync latency: from a pod turning Ready to its Service's
//     cluster IP answering from it (a Service scaled 0 -> 1, --rounds
//     times), without a readiness gate and with the load-balancer gate,
//     which also waits for the proxy's rules (and the time that gate adds
//     between the containers' readiness and the pod's);
//
//   - DNS lookups per second through CoreDNS (the kube-dns cluster IP), one
//     at a time and 8 at once, for --dns-seconds each;
//
//   - kube-proxy's rule sync with --services Services: how long after the
//     last one was created its cluster IP answered, and the duration of
//     kube-proxy's syncs then (its own metric).
//
// Traffic to the service range that kube-proxy did not rewrite is dropped on
// the machine while it runs; the node's resolver file names no server, so no
// lookup leaves the machine.
//
//	sudo go run ./bench/services [--rounds 10] [--services 1000]
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
)

const serviceCIDR = "10.96.0.0/16"

func main() {
	rounds := flag.Int("rounds", 10, "scale-ups measured for the proxy's sync latency")
	services := flag.Int("services", 1000, "Services created for the rule sync")
	dnsSeconds := flag.Duration("dns-seconds", 5*time.Second, "how long each DNS load runs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *rounds, *services, *dnsSeconds); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, rounds, services int, dnsFor time.Duration) error {
	bin, err := testenv.Binary()
	if err != nil {
		return err
	}
	undrop, err := testenv.DropServiceRange(serviceCIDR)
	if err != nil {
		return err
	}
	defer undrop()
	b, err := testenv.NewBenchUp("services", 249, "sps", "--service-cidr", serviceCIDR)
	if err != nil {
		return err
	}
	defer b.Cleanup()
	dataDir, args, ports := b.DataDir, b.Args, b.Ports
	if err := testimage.BusyboxArchive(filepath.Join(dataDir, "images", "busybox.tar")); err != nil {
		return err
	}
	up, err := testenv.StartUp(ctx, bin, args)
	if err != nil {
		return err
	}
	defer up.Stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cs := kubernetes.NewForConfigOrDie(cfg)

	// 1. Ready -> forwarded, without a readiness gate and with the
	// load-balancer gate, which waits for the proxies (up passes the
	// readiness controller --proxy-healthz-port).
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "gated", Labels: map[string]string{"steadyplane.io/readiness-gates": "on"}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, ns := range []string{"gated", "default"} {
		// In gated, the gate is the pod's only readiness check: the first
		// figure is then what it takes.
		svcIP, err := app(ctx, cs, ns, ns == "default")
		if err != nil {
			return err
		}
		var lat, gate []time.Duration
		for i := 0; i < rounds; i++ {
			// The last round in default leaves the pod running for the
			// Services below.
			r, err := readyToForwarded(ctx, cs, ns, svcIP, ns == "default" && i == rounds-1)
			if err != nil {
				return err
			}
			lat, gate = append(lat, r.forwarded), append(gate, r.gate)
		}
		slices.Sort(lat)
		slices.Sort(gate)
		what := "no readiness gate"
		if ns == "gated" {
			what = "load-balancer gate waiting for the proxy"
		}
		fmt.Printf("%s (%d scale-ups): containers ready -> pod Ready median %v, max %v; pod Ready -> its Service forwards to it median %v, max %v\n",
			what, len(lat), gate[len(gate)/2].Round(time.Millisecond), gate[len(gate)-1].Round(time.Millisecond),
			lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	}

	// 2. DNS through CoreDNS.
	dnsIP := "10.96.0.10"
	for _, par := range []int{1, 8} {
		n, failed := lookups(ctx, dnsIP, "web.default.svc.cluster.local.", par, dnsFor)
		fmt.Printf("DNS lookups through CoreDNS (%s; A and AAAA each), %d at once: %.0f per second (%d failed)\n", dnsIP, par, float64(n)/dnsFor.Seconds(), failed)
	}

	// 3. Rule sync with many Services.
	metricsPort := ports[10] // UpArgs: --proxy-metrics-port
	before := syncMetric(metricsPort)
	start := time.Now()
	var last string
	for i := 0; i < services; i++ {
		s, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "many-" + strconv.Itoa(i)},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		last = s.Spec.ClusterIP
	}
	created := time.Since(start)
	answered, err := waitAnswer(ctx, last, 2*time.Minute)
	if err != nil {
		return err
	}
	time.Sleep(3 * time.Second) // a sync or two with every Service in place
	after := syncMetric(metricsPort)
	fmt.Printf("%d Services created in %v; the last one's cluster IP answered %v after its creation (the EndpointSlice controller's API rate included)\n", services, created.Round(time.Millisecond), answered.Sub(start.Add(created)).Round(time.Millisecond))
	if after.count <= before.count {
		fmt.Printf("kube-proxy's sync metric not read (127.0.0.1:%d/metrics)\n", metricsPort)
	} else {
		fmt.Printf("kube-proxy syncs meanwhile: %d, mean %.0f ms (kubeproxy_sync_proxy_rules_duration_seconds)\n",
			int(after.count-before.count), 1000*(after.sum-before.sum)/(after.count-before.count))
	}
	return nil
}

// app creates, in namespace ns, the Deployment web (busybox httpd,
// answering at once, 0 replicas; with probe, a TCP readiness probe every
// second) and a Service in front, and returns the Service's cluster IP.
func app(ctx context.Context, cs kubernetes.Interface, ns string, probe bool) (string, error) {
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(1)), Containers: []corev1.Container{{
					Name: "web", Image: testimage.BusyboxName, Command: []string{"sh", "-c", "echo ok > index.html; trap 'exit 0' TERM; httpd -f -p 8080 & wait"},
					Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(8080)}}},
				}}},
			},
		},
	}
	if !probe {
		deploy.Spec.Template.Spec.Containers[0].ReadinessProbe = nil
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return svc.Spec.ClusterIP, nil
}

// round is one scale-up's figures: from the pod's containers turning ready
// to the pod turning Ready (the readiness gates' share), and from Ready to
// its Service's cluster IP answering (the proxy's sync latency).
type round struct{ gate, forwarded time.Duration }

// readyToForwarded scales web in ns to 1 and times it (round), both
// moments as seen on a watch; with keep it stays at 1, else it goes back
// to 0.
func readyToForwarded(ctx context.Context, cs kubernetes.Interface, ns, ip string, keep bool) (round, error) {
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		return round{}, err
	}
	defer w.Stop()
	if err := scale(ctx, cs, ns, 1); err != nil {
		return round{}, err
	}
	type seen struct{ containers, ready time.Time }
	ready := make(chan seen, 1)
	go func() {
		var s seen
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.DeletionTimestamp != nil {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.ContainersReady && c.Status == corev1.ConditionTrue && s.containers.IsZero() {
					s.containers = time.Now()
				}
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					s.ready = time.Now()
					ready <- s
					return
				}
			}
		}
	}()
	var s seen
	select {
	case s = <-ready:
	case <-time.After(2 * time.Minute):
		return round{}, errors.New("the pod did not become Ready")
	}
	answeredAt, err := waitAnswer(ctx, ip, time.Minute)
	if err != nil {
		return round{}, err
	}
	if !keep {
		if err := scale(ctx, cs, ns, 0); err != nil {
			return round{}, err
		}
		// Until the cluster IP refuses again: the next round starts from none.
		for d := time.Now().Add(time.Minute); get(ip) == nil && time.Now().Before(d); time.Sleep(50 * time.Millisecond) {
		}
	}
	return round{gate: max(s.ready.Sub(s.containers), 0), forwarded: max(answeredAt.Sub(s.ready), 0)}, nil
}

func scale(ctx context.Context, cs kubernetes.Interface, ns string, n int32) error {
	_, err := cs.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n), metav1.PatchOptions{})
	return err
}

func get(ip string) error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + net.JoinHostPort(ip, "80") + "/")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func waitAnswer(ctx context.Context, ip string, timeout time.Duration) (time.Time, error) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
		if get(ip) == nil {
			return time.Now(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s did not answer within %v", ip, timeout)
}

// lookups resolves name at server par at a time for d, and counts.
func lookups(ctx context.Context, server, name string, par int, d time.Duration) (ok, failed int64) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", net.JoinHostPort(server, "53"))
	}}
	var n, bad atomic.Int64
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; i < par; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := r.LookupHost(lctx, name)
				cancel()
				if err != nil {
					bad.Add(1)
				} else {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return n.Load(), bad.Load()
}

type histogram struct{ sum, count float64 }

// syncMetric reads kube-proxy's sync duration histogram from its metrics
// port on 127.0.0.1.
func syncMetric(port int) histogram {
	var h histogram
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/metrics")
	if err != nil {
		return h
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for suffix, dst := range map[string]*float64{"_sum": &h.sum, "_count": &h.count} {
			// With or without labels (the IP family): the value is last.
			if rest, ok := strings.CutPrefix(line, "kubeproxy_sync_proxy_rules_duration_seconds"+suffix); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
				f := strings.Fields(rest)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				*dst += v
			}
		}
	}
	return h
}
