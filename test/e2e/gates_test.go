package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/internal/testimage"
	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/readinessgates"
	"github.com/steadyplane/steadyplane/pkg/readinessgates/lbgate"
	"github.com/steadyplane/steadyplane/pkg/readinessgates/webhook"
)

// gatesOnEveryServer creates a pod through each of servers alone (a
// client of that server only), in a namespace that asks for the
// load-balancer gate: each API server calls its own server's webhook,
// which injects the gate, and the one controller that holds the Lease
// turns it True, so every pod becomes Ready. It returns the Lease's
// holder.
func gatesOnEveryServer(t *testing.T, ctx context.Context, servers []*server, suffix string) string {
	t.Helper()
	admin := testup.HAClient(t, servers[0].kubeconfig())
	const ns = "gated"
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{webhook.PolicyKey: "on"}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var names []string
	for _, s := range servers {
		direct, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig()) // that server alone
		if err != nil {
			t.Fatal(err)
		}
		direct.Timeout = 20 * time.Second
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gated-" + s.name + suffix, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: testimage.BusyboxName, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "cd /tmp && echo ok > index.html && exec httpd -f -p 8080"},
				Ports:   []corev1.ContainerPort{{ContainerPort: 8080}}}}}}
		// The server may have just come back: its webhook takes a
		// moment after its API server.
		var created *corev1.Pod
		for i := 0; i < 20; i++ {
			created, err = kubernetes.NewForConfigOrDie(direct).CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			if err == nil && slices.ContainsFunc(created.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return g.ConditionType == lbgate.ConditionType }) {
				break
			}
			if err == nil {
				_ = admin.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
				time.Sleep(2 * time.Second)
				err = fmt.Errorf("created without the gate: %v", created.Spec.ReadinessGates)
			} else {
				time.Sleep(time.Second)
			}
		}
		if err != nil {
			t.Fatalf("a pod created through %s alone: %v; want the gate %s injected by that server's webhook", s.name, err, lbgate.ConditionType)
		}
		names = append(names, pod.Name)
	}
	begun := time.Now()
	testup.WaitFor(t, ctx, 2*time.Minute, "the gated pods Ready", func() (bool, string) {
		var states []string
		ready := 0
		for _, n := range names {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			state := n + "@" + p.Spec.NodeName + ":"
			for _, c := range p.Status.Conditions {
				if c.Type == lbgate.ConditionType || c.Type == corev1.PodReady {
					state += fmt.Sprintf(" %s=%s(%s)", c.Type, c.Status, c.Reason)
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			states = append(states, state)
		}
		return ready == len(names), strings.Join(states, "; ")
	})
	holder := gateHolderNow(t, ctx, servers[0].kubeconfig())
	t.Logf("gated pods created through %d servers Ready %.1fs after the last was created; the gate's controller: %s", len(names), time.Since(begun).Seconds(), holder)
	return holder
}

// gateHolderNow is the holder of the readiness controllers' Lease.
func gateHolderNow(t *testing.T, ctx context.Context, kubeconfig string) string {
	t.Helper()
	lease, err := testup.HAClient(t, kubeconfig).CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, readinessgates.LeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("the readiness controllers' Lease: %v, %v", lease, err)
	}
	return *lease.Spec.HolderIdentity
}
