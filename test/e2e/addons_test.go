package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/internal/testup"
)

// TestStorageMetricsLoadBalancers runs the README's "Storage, metrics and
// load balancers" verbatim on "steadyplane up": a LoadBalancer Service gets
// the node's address and answers there through kube-proxy, from the
// machine; a second one on the same port stays pending with a
// PortConflict condition and Event naming the first.
func TestStorageMetricsLoadBalancers(t *testing.T) {
	block := testup.ReadmeBlock(t, "Storage, metrics and load balancers")
	ctx, dataDir, script := testup.StartWalkthrough(t, 10*time.Minute)
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().Get(ctx, "steadyplane", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeIP := ""
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}

	out := script("the README's storage, metrics and load balancers walkthrough", block)
	var external, answered, conflict bool
	for _, l := range strings.Split(out, "\n") {
		// NAME  TYPE  CLUSTER-IP  EXTERNAL-IP  PORT(S)  AGE
		if f := strings.Fields(l); len(f) == 6 && f[0] == "web" && f[1] == "LoadBalancer" {
			external = f[3] == nodeIP
		}
		answered = answered || strings.HasPrefix(l, "hello from web-")
		conflict = conflict || strings.Contains(l, "80/TCP on node steadyplane is held by Service default/web (LoadBalancer)")
	}
	if !external || !answered || !conflict {
		t.Errorf("load balancers: EXTERNAL-IP the node's address %s %v, a pod answered there %v, the second Service's PortConflict names the first %v; want all", nodeIP, external, answered, conflict)
	}
}
