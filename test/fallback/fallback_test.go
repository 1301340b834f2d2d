// Package fallback runs the static-pod fallback end to end on "steadyplane
// up": the seed's test plan with short timeouts, and kill -9 of each part
// mid-rollout. It is a package of its own so that it runs alongside the other
// end-to-end packages, within its own timeout.
package fallback

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/internal/outage"
	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
)

// TestStaticPodFallback runs the README's walkthrough "a bad config cannot
// brick your cluster" verbatim (unknown flag: CrashLooping, not retried; a
// good change clears Degraded), then the seed's other cases against the
// same "up" with short timeouts (45s to be ready: an API server whose etcd
// does not answer serves /healthz only after 15-30s): an invalid audit policy from a ConfigMap
// (CrashLooping), a manifest the node agent refuses (NeverStartedUp, not
// retried), etcd unreachable (EtcdUnhealthy, retried) and a post-start
// hook that never finishes (NotReady, retried). Each asserts that the API
// answers again on a good revision, the condition, the mirror pod's
// annotations and the retry decision, and logs the outage.
// noProxy leaves kube-proxy out of the fallback's clusters: its nftables
// table is the machine's, and the end-to-end package, which runs at the
// same time, tests Services with its own.
const noProxy = "--proxy=false"

func TestStaticPodFallback(t *testing.T) {
	block := testup.ReadmeBlock(t, "A bad config cannot brick your cluster")
	ctx, dataDir, run := testup.StartWalkthrough(t, 20*time.Minute,
		"--fallback-timeout=45s", "--fallback-retry-base=20s", "--fallback-retry-max=1m", noProxy)
	cfg, cs, api := clients(t, dataDir)

	out := run("the README's fallback walkthrough", block)
	for _, want := range []string{`"reason":"CrashLooping"`, "unknown flag: --no-such-flag", "Not retried",
		`"startup-monitor.steadyplane.io/fallback-reason":"CrashLooping"`, `"startup-monitor.steadyplane.io/fallback-for-revision":"2"`} {
		if !strings.Contains(out, want) {
			t.Errorf("walkthrough output lacks %q", want)
		}
	}
	obj := getCluster(ctx, t, api)
	ns := obj.Status.NodeStatuses[0]
	if obj.Status.LatestAvailableRevision != 3 || ns.CurrentRevision != 3 || ns.LastFailedRevision != 2 || ns.LastFailedReason != "CrashLooping" {
		t.Errorf("after the walkthrough: latest %d, node %+v; want 3 current, 2 failed with CrashLooping (and no retry revision)", obj.Status.LatestAvailableRevision, ns)
	}
	if c := condition(obj, v1alpha1.ConditionDegraded); c.Status != metav1.ConditionFalse {
		t.Errorf("Degraded after a good rollout: %+v", c)
	}

	// The seed's other cases, each from a good revision.
	auditCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "audit", Namespace: v1alpha1.Namespace}, Data: map[string]string{"policy.yaml": "this is: [not a policy"}}
	if _, err := cs.CoreV1().ConfigMaps(v1alpha1.Namespace).Create(ctx, auditCM, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The operator renders every revision from the templates "up" wrote on
	// the node; a
	// broken template (a container name the pod validation refuses) makes a
	// manifest the node agent cannot run, the seed's unparsable manifest.
	templatesName := operator.TemplatesName(obj.Status.NodeStatuses[0].NodeName)
	templates, err := cs.CoreV1().ConfigMaps(v1alpha1.Namespace).Get(ctx, templatesName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	goodOperand := templates.Data[operator.OperandKey]
	const containerName = "\n    name: kube-apiserver\n" // the container's, not the pod's (indented two)
	setOperandTemplate := func(data string) {
		t.Helper()
		cm, err := cs.CoreV1().ConfigMaps(v1alpha1.Namespace).Get(ctx, templatesName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data[operator.OperandKey] = data
		if _, err := cs.CoreV1().ConfigMaps(v1alpha1.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		spec    string
		breakIt func() // instead of a spec
		fix     func()
		reason  fallback.Reason
		message string
	}{
		{name: "invalid audit policy in a ConfigMap", spec: `{"spec":{"configMaps":["audit"],"extraArgs":["--audit-policy-file=/etc/kubernetes/static-pod-resources/configmaps/audit/policy.yaml","--audit-log-path=-"]}}`,
			reason: fallback.CrashLooping, message: "policy"},
		{name: "a manifest the node agent refuses", breakIt: func() {
			setOperandTemplate(strings.Replace(goodOperand, containerName, "\n    name: kube_apiserver\n", 1))
		}, fix: func() { setOperandTemplate(goodOperand) }, reason: fallback.NeverStartedUp, message: "kube_apiserver"},
		// Not a second --etcd-servers: the flag is a list, and a second one adds a server.
		{name: "etcd unreachable (the wrong CA for it)", spec: fmt.Sprintf(`{"spec":{"configMaps":[],"extraArgs":["--etcd-cafile=%s"]}}`, filepath.Join(dataDir, "pki", "ca.crt")),
			reason: fallback.EtcdUnhealthy, message: "etcd"},
		{name: "a post-start hook that never finishes", spec: `{"spec":{"extraArgs":["--test-unfinished-post-start-hook"]}}`, reason: fallback.NotReady, message: "steadyplane-test-never-finishes"},
	}
	if !strings.Contains(goodOperand, containerName) {
		t.Fatalf("the operand template has no container name to break:\n%s", goodOperand)
	}
	for _, c := range cases {
		before := getCluster(ctx, t, api)
		failedBefore := before.Status.NodeStatuses[0].LastFailedRevision
		start := time.Now()
		watch := outage.Watch(ctx, cfg)
		if c.breakIt != nil {
			c.breakIt()
		} else {
			patch(ctx, t, api, c.spec)
		}
		obj := waitCluster(ctx, t, api, 4*time.Minute, c.name+": a fallback", func(o *v1alpha1.KubeAPIServer) bool {
			return o.Status.NodeStatuses[0].LastFailedRevision > failedBefore
		})
		d := watch()
		ns := obj.Status.NodeStatuses[0]
		t.Logf("%s: revision %d fell back (%s) to %d; API outage %v, fallback recorded %v after the change", c.name, ns.LastFailedRevision, ns.LastFailedReason, ns.CurrentRevision, d, time.Since(start).Round(100*time.Millisecond))
		deg := condition(obj, v1alpha1.ConditionDegraded)
		if ns.LastFailedReason != string(c.reason) || deg.Status != metav1.ConditionTrue || deg.Reason != string(c.reason) || !strings.Contains(deg.Message, c.message) {
			t.Errorf("%s: node %+v, Degraded %+v; want reason %s, a message with %q", c.name, ns, deg, c.reason, c.message)
		}
		if ns.CurrentRevision >= ns.LastFailedRevision {
			t.Errorf("%s: runs revision %d, not an earlier one than the failed %d", c.name, ns.CurrentRevision, ns.LastFailedRevision)
		}
		mirror, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, "kube-apiserver-"+ns.NodeName, metav1.GetOptions{})
		if err != nil || mirror.Annotations[fallback.FallbackReasonAnnotation] != string(c.reason) {
			t.Errorf("%s: mirror pod annotations %v (%v)", c.name, mirror.GetAnnotations(), err)
		}
		if fallback.Retried(c.reason) {
			if !strings.Contains(deg.Message, "Retrying as a new revision") {
				t.Errorf("%s: Degraded does not announce the retry: %q", c.name, deg.Message)
			}
			failed := ns.LastFailedRevision
			retried := waitCluster(ctx, t, api, 3*time.Minute, c.name+": the retry", func(o *v1alpha1.KubeAPIServer) bool {
				return o.Status.LatestAvailableRevision > failed
			})
			t.Logf("%s: retried as revision %d", c.name, retried.Status.LatestAvailableRevision)
			// Still broken: wait for the retry's verdict before fixing.
			waitCluster(ctx, t, api, 4*time.Minute, c.name+": the retry's fallback", func(o *v1alpha1.KubeAPIServer) bool {
				return o.Status.NodeStatuses[0].LastFailedRevision > failed
			})
		} else if strings.Contains(deg.Message, "Retrying") {
			t.Errorf("%s: %s announced a retry: %q", c.name, c.reason, deg.Message)
		}
		// Fixed by a good spec: rolls out and clears Degraded.
		if c.fix != nil {
			c.fix()
		}
		patch(ctx, t, api, `{"spec":{"configMaps":[],"extraArgs":["--max-requests-inflight=500"]}}`)
		good := waitCluster(ctx, t, api, 4*time.Minute, c.name+": the fix", func(o *v1alpha1.KubeAPIServer) bool {
			return condition(o, v1alpha1.ConditionDegraded).Status == metav1.ConditionFalse && o.Status.NodeStatuses[0].CurrentRevision == o.Status.LatestAvailableRevision
		})
		t.Logf("%s: fixed, revision %d", c.name, good.Status.LatestAvailableRevision)
	}

	// Exactly one API server runs, and the operator's metrics count the fallbacks.
	pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=kube-apiserver"})
	if err != nil || len(pods.Items) != 1 {
		t.Errorf("kube-apiserver pods: %d (%v), want 1", len(pods.Items), err)
	}
	events, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=KubeAPIServer"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range events.Items {
		seen[e.Reason] += int(max(e.Count, 1))
	}
	t.Logf("events: %v", seen)
	for _, r := range []string{"RevisionCreated", "InstallerStarted", "RevisionFallback", "RevisionRolledOut", "RevisionRetry"} {
		if seen[r] == 0 {
			t.Errorf("no %s event", r)
		}
	}
}

// clients are the admin's: a config (5s timeout), a clientset and the
// KubeAPIServer client.
func clients(t *testing.T, dataDir string) (*rest.Config, kubernetes.Interface, v1alpha1.Client) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 5 * time.Second
	return cfg, kubernetes.NewForConfigOrDie(cfg), v1alpha1.Client{Dynamic: dynamic.NewForConfigOrDie(cfg)}
}

func getCluster(ctx context.Context, t *testing.T, api v1alpha1.Client) *v1alpha1.KubeAPIServer {
	t.Helper()
	obj, err := api.Get(ctx, v1alpha1.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(obj.Status.NodeStatuses) != 1 {
		t.Fatalf("node statuses %+v, want one", obj.Status.NodeStatuses)
	}
	return obj
}

// waitCluster polls the object (through API outages) until ok, or fails.
func waitCluster(ctx context.Context, t *testing.T, api v1alpha1.Client, timeout time.Duration, what string, ok func(*v1alpha1.KubeAPIServer) bool) *v1alpha1.KubeAPIServer {
	t.Helper()
	var last *v1alpha1.KubeAPIServer
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(500 * time.Millisecond) {
		obj, err := api.Get(ctx, v1alpha1.Name)
		if err != nil || len(obj.Status.NodeStatuses) != 1 {
			continue
		}
		last = obj
		if ok(obj) {
			return obj
		}
	}
	t.Fatalf("%s: not within %v; last status %+v", what, timeout, last)
	return nil
}

func patch(ctx context.Context, t *testing.T, api v1alpha1.Client, spec string) {
	t.Helper()
	if _, err := api.Dynamic.Resource(v1alpha1.GroupVersionResource).Patch(ctx, v1alpha1.Name, types.MergePatchType, []byte(spec), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching the spec with %s: %v", spec, err)
	}
}

func condition(obj *v1alpha1.KubeAPIServer, typ string) metav1.Condition {
	for _, c := range obj.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}
