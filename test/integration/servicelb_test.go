package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/pkg/addons/addonctl"
	"github.com/steadyplane/steadyplane/pkg/addons/servicelb"
	"github.com/steadyplane/steadyplane/pkg/controlplane"
)

// TestServiceLoadBalancers runs the add-on controllers' load balancers
// against a real API server, as their own user with the RBAC up grants
// (impersonated by the admin): LoadBalancer Services get the Ready nodes'
// addresses; a port an older Service holds, or steadyplane's own, is a
// PortConflict (condition and Event); a node that turns NotReady leaves;
// a deleted Service frees its port for the next; a Service that is no
// longer a LoadBalancer loses its addresses and the condition.
func TestServiceLoadBalancers(t *testing.T) {
	// No node agent and no node lifecycle controller: the test's Nodes
	// are what it says they are.
	ctx, cp, _, _ := startControlPlaneWith(t, func(o *controlplane.Options) { o.Node, o.Controllers = false, false })
	admin, err := cp.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(admin)
	if err := addonctl.EnsureRBAC(ctx, cs); err != nil {
		t.Fatal(err)
	}
	as := rest.CopyConfig(admin)
	as.Impersonate = rest.ImpersonationConfig{UserName: addonctl.User}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- addonctl.Run(runCtx, as, addonctl.Options{Controllers: []string{addonctl.ServiceLB}, Identity: "it",
			Reserved: []servicelb.Reserved{{Port: servicelb.Port{Protocol: corev1.ProtocolTCP, Port: 10256}, Holder: "kube-proxy-healthz"}}})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("the add-on controllers: %v", err)
		}
	})

	setNode := func(name, ip string, ready corev1.ConditionStatus) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if n, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "Test", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setNode("lb-a", "10.0.0.1", corev1.ConditionTrue)
	setNode("lb-b", "10.0.0.2", corev1.ConditionTrue)

	services := cs.CoreV1().Services("default")
	create := func(name string, port int32) {
		t.Helper()
		_, err := services.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: port, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Creation times are in seconds: the next Service is younger.
		time.Sleep(1100 * time.Millisecond)
	}
	expect := func(name string, ips []string, reason, message string) {
		t.Helper()
		waitFor(ctx, t, 30*time.Second, name+" "+reason+" at "+strings.Join(ips, ","), func() (bool, string) {
			s, err := services.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, in := range s.Status.LoadBalancer.Ingress {
				got = append(got, in.IP)
			}
			c := meta.FindStatusCondition(s.Status.Conditions, servicelb.ConditionType)
			if reason == "" {
				return c == nil && len(got) == 0, strings.Join(got, ",")
			}
			if c == nil {
				return false, "no condition; ingress " + strings.Join(got, ",")
			}
			return strings.Join(got, ",") == strings.Join(ips, ",") && c.Reason == reason && strings.Contains(c.Message, message),
				strings.Join(got, ",") + " " + c.Reason + ": " + c.Message
		})
	}
	warned := func(name, reason, message string) {
		t.Helper()
		waitFor(ctx, t, 30*time.Second, "a "+reason+" event on "+name, func() (bool, string) {
			evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, message) {
					return true, ""
				}
			}
			return false, "none yet"
		})
	}

	create("web", 80)
	expect("web", []string{"10.0.0.1", "10.0.0.2"}, servicelb.ReasonAssigned, "on 2 nodes (lb-a, lb-b)")
	create("clash", 80)
	expect("clash", nil, servicelb.ReasonPortConflict, "80/TCP on node lb-a is held by Service default/web (LoadBalancer)")
	warned("clash", servicelb.ReasonPortConflict, "held by Service default/web")
	create("healthz", 10256)
	expect("healthz", nil, servicelb.ReasonPortConflict, "held by steadyplane (kube-proxy-healthz)")

	setNode("lb-b", "10.0.0.2", corev1.ConditionFalse)
	expect("web", []string{"10.0.0.1"}, servicelb.ReasonAssigned, "on node lb-a")

	if err := services.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("clash", []string{"10.0.0.1"}, servicelb.ReasonAssigned, "lb-a")

	s, err := services.Get(ctx, "clash", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Type = corev1.ServiceTypeClusterIP
	for i := range s.Spec.Ports {
		s.Spec.Ports[i].NodePort = 0
	}
	s.Spec.ExternalTrafficPolicy = ""
	if _, err := services.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("clash", nil, "", "")
}
