// Command addons measures the add-ons of a "steadyplane up" cluster on this
// machine, in one run:
//
//   - local storage: --runs times, a claim of the default StorageClass and a
//     pod that mounts it are created together; the time until the claim is
//     Bound and until the pod is Running; then both are deleted, and the
//     time until the volume and its directory are gone;
//
//   - load balancers: --runs times, a LoadBalancer Service is created for a
//     running Deployment; the time until its status has the node's address,
//     and until a TCP connection to that address and port is answered (the
//     node's kube-proxy has the rule);
//
//   - metrics: the time from up ready until kubectl top answers; the age of
//     the newest sample when asked (freshness); the time until a new pod
//     has metrics; and, with 100 pods on the node, what one scrape of the
//     node agent's /metrics/resource and /stats/summary costs it in CPU and
//     takes (metricsFigures).
//
// Figures are medians and the worst of the runs.
//
//	sudo go run ./bench/addons [--runs 10]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/internal/testimage"
)

func main() {
	runs := flag.Int("runs", 10, "claims and Services measured")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, max(*runs, 1)); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// poll is how often a figure's condition is asked: its resolution.
const poll = 20 * time.Millisecond

func run(ctx context.Context, runs int) error {
	bin, err := testenv.Binary()
	if err != nil {
		return err
	}
	b, err := testenv.NewBenchUp("addons", 236, "spa")
	if err != nil {
		return err
	}
	defer b.Cleanup()
	if err := testimage.BusyboxArchive(filepath.Join(b.DataDir, "images", "busybox.tar")); err != nil {
		return err
	}
	up, err := testenv.StartUp(ctx, bin, b.Args)
	if err != nil {
		return err
	}
	defer up.Stop()
	upReady := time.Now()
	fmt.Printf("up ready in %.1fs\n", up.AllReady.Seconds())
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(b.DataDir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	cfg.WarningHandler = rest.NoWarnings{} // the pods are the bench's, not for Pod Security's advice
	cs := kubernetes.NewForConfigOrDie(cfg)
	first := firstMetrics(ctx, cfg, upReady)
	if err := storage(ctx, cs, runs); err != nil {
		return err
	}
	if err := loadBalancers(ctx, cs, runs); err != nil {
		return err
	}
	return metricsFigures(ctx, cfg, cs, b.DataDir, first, runs)
}

// until polls cond until it holds and returns how long that took since
// start, or fails after a minute.
func until(ctx context.Context, start time.Time, what string, cond func() (bool, error)) (time.Duration, error) {
	return untilWithin(ctx, start, time.Minute, what, cond)
}

// untilWithin is until with a limit of its own.
func untilWithin(ctx context.Context, start time.Time, limit time.Duration, what string, cond func() (bool, error)) (time.Duration, error) {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: not within %s", what, limit)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(poll):
		}
	}
}

func storage(ctx context.Context, cs kubernetes.Interface, runs int) error {
	var bound, running, deleted []time.Duration
	claims, pods := cs.CoreV1().PersistentVolumeClaims("default"), cs.CoreV1().Pods("default")
	for i := range runs {
		name := "data-" + strconv.Itoa(i)
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Mi")}}}}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0),
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
			Containers: []corev1.Container{{Name: "c", Image: testimage.BusyboxName, Command: []string{"sleep", "3600"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}}
		start := time.Now()
		if _, err := claims.Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return err
		}
		var volume string
		d, err := until(ctx, start, "claim Bound", func() (bool, error) {
			c, err := claims.Get(ctx, name, metav1.GetOptions{})
			volume = c.Spec.VolumeName
			return err == nil && c.Status.Phase == corev1.ClaimBound, err
		})
		if err != nil {
			return err
		}
		bound = append(bound, d)
		if d, err = until(ctx, start, "pod Running", func() (bool, error) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		}); err != nil {
			return err
		}
		running = append(running, d)
		pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
		if err != nil {
			return err
		}
		start = time.Now()
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if err := claims.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if d, err = until(ctx, start, "volume and directory gone", func() (bool, error) {
			_, err := cs.CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
			_, statErr := os.Stat(pv.Spec.Local.Path)
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err
			}
			return apierrors.IsNotFound(err) && os.IsNotExist(statErr), nil
		}); err != nil {
			return err
		}
		deleted = append(deleted, d)
	}
	fmt.Printf("local storage, %d claims (each with its pod, created together; polled every %v):\n", runs, poll)
	line("claim Bound", bound)
	line("pod Running", running)
	line("pod and claim deleted → volume and directory gone", deleted)
	return nil
}

func loadBalancers(ctx context.Context, cs kubernetes.Interface, runs int) error {
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: testimage.BusyboxName, Command: []string{"httpd", "-f", "-p", "8080"}}}}}}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := until(ctx, time.Now(), "web available", func() (bool, error) {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == 1, err
	}); err != nil {
		return err
	}
	services := cs.CoreV1().Services("default")
	var assigned, answered []time.Duration
	for i := range runs {
		name := "lb-" + strconv.Itoa(i)
		port := int32(8000 + i) // each its own port: the older Service would keep one
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: labels,
			Ports: []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt32(8080)}}}}
		start := time.Now()
		if _, err := services.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return err
		}
		var ip string
		d, err := until(ctx, start, "ingress", func() (bool, error) {
			s, err := services.Get(ctx, name, metav1.GetOptions{})
			if err == nil && len(s.Status.LoadBalancer.Ingress) > 0 {
				ip = s.Status.LoadBalancer.Ingress[0].IP
			}
			return ip != "", err
		})
		if err != nil {
			return err
		}
		assigned = append(assigned, d)
		addr := net.JoinHostPort(ip, strconv.Itoa(int(port)))
		if d, err = until(ctx, start, "an answer at "+addr, func() (bool, error) {
			c, err := net.DialTimeout("tcp", addr, poll)
			if err == nil {
				c.Close()
			}
			return err == nil, nil
		}); err != nil {
			return err
		}
		answered = append(answered, d)
		if err := services.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	fmt.Printf("load balancers, %d Services (polled every %v):\n", runs, poll)
	line("EXTERNAL-IP set", assigned)
	line("answers at EXTERNAL-IP", answered)
	return nil
}

// line prints a figure's median and worst.
func line(what string, ds []time.Duration) {
	fmt.Printf("  %-52s median %6.2fs  worst %6.2fs\n", what, testenv.Median(ds).Seconds(), slices.Max(ds).Seconds())
}
