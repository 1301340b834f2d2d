package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/internal/testup"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
)

// rollRevisionsAcrossServers is part 5 of the three-server walkthrough: a
// bad revision stops at the first node, which falls back to its
// last-known-good (the cluster keeps three servers, the others keep theirs,
// Degraded names the node); a fixed spec rolls out to all, one server at a
// time, while a client-go reader runs and sees no error. (A good revision
// rolled from a good one is the fix's case; bench/northstar measures both.)
func rollRevisionsAcrossServers(t *testing.T, ctx context.Context, kubeconfig string, names []string) {
	cfg, _, err := clientconfig.Load(kubeconfig, clientconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	api := v1alpha1.Client{Dynamic: dynamic.NewForConfigOrDie(cfg)}
	defer func() {
		if !t.Failed() {
			return
		}
		// The operator's story, for the failure.
		evs, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=" + v1alpha1.Kind})
		if err != nil {
			t.Logf("events: %v", err)
			return
		}
		for _, e := range evs.Items {
			t.Logf("event %s %s %s: %s", e.LastTimestamp.Format(time.TimeOnly), e.Type, e.Reason, e.Message)
		}
	}()
	status := func() (*v1alpha1.KubeAPIServer, string) {
		obj, err := api.Get(ctx, v1alpha1.Name)
		if err != nil {
			return nil, err.Error()
		}
		return obj, operator.Summary(obj.Status)
	}
	every := func(obj *v1alpha1.KubeAPIServer, n int32) bool { return operator.AllAt(obj.Status, names, n) }
	var start int32
	testup.WaitFor(t, ctx, 3*time.Minute, "the three servers at one revision of the operator", func() (bool, string) {
		obj, s := status()
		if obj == nil {
			return false, s
		}
		start = obj.Status.LatestAvailableRevision
		return start > 0 && every(obj, start), s
	})
	patch := func(spec string) {
		t.Helper()
		if _, err := api.Dynamic.Resource(v1alpha1.GroupVersionResource).Patch(ctx, v1alpha1.Name, types.MergePatchType, []byte(spec), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patching KubeAPIServer %s: %v", v1alpha1.Name, err)
		}
	}
	rollOut := func(what, spec string, n int32) {
		t.Helper()
		reader := startReader(t, ctx, kubeconfig)
		begun := time.Now()
		patch(spec)
		// Each server restarts its API server in turn: on CI's two busy
		// cores that takes up to two minutes a server.
		testup.WaitFor(t, ctx, 8*time.Minute, fmt.Sprintf("%s: revision %d on the three servers", what, n), func() (bool, string) {
			obj, s := status()
			return obj != nil && every(obj, n), s
		})
		reads, failed, gap := reader()
		t.Logf("%s: revision %d rolled over the three servers in %.1fs; reader %d reads, %d failed, longest gap %v", what, n, time.Since(begun).Seconds(), reads, failed, gap)
		if failed > 0 {
			t.Errorf("%s: the reader saw %d failed reads of %d while a good revision rolled", what, failed, reads)
		}
	}

	begun := time.Now()
	patch(`{"spec":{"extraArgs":["--no-such-flag"]}}`)
	bad := start + 1
	var failedOn string
	testup.WaitFor(t, ctx, 5*time.Minute, fmt.Sprintf("revision %d failing on one server and falling back there", bad), func() (bool, string) {
		obj, s := status()
		if obj == nil {
			return false, s
		}
		for _, ns := range obj.Status.NodeStatuses {
			if ns.LastFailedRevision == bad && ns.CurrentRevision == start {
				failedOn = ns.NodeName
			}
		}
		return failedOn != "", s
	})
	t.Logf("a bad revision: %s fell back in %.1fs", failedOn, time.Since(begun).Seconds())
	// The rollout stopped there: a while later no other server was given
	// the bad revision, all three run the good one, and Degraded says where.
	time.Sleep(10 * time.Second)
	obj, s := status()
	if obj == nil {
		t.Fatal(s)
	}
	if !every(obj, start) {
		t.Errorf("after the bad revision failed on %s, not every server runs revision %d: %s", failedOn, start, s)
	}
	for _, ns := range obj.Status.NodeStatuses {
		if ns.NodeName != failedOn && (ns.LastFailedRevision == bad || ns.TargetRevision == bad) {
			t.Errorf("the bad revision went on to %s: %s", ns.NodeName, s)
		}
	}
	if c := meta.FindStatusCondition(obj.Status.Conditions, v1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "node "+failedOn) {
		t.Errorf("Degraded after the bad revision: %+v; want True naming node %s", c, failedOn)
	}

	rollOut("the fixed spec", `{"spec":{"extraArgs":["--max-requests-inflight=501"]}}`, start+2)
	if obj, s := status(); obj == nil {
		t.Error(s)
	} else if c := meta.FindStatusCondition(obj.Status.Conditions, v1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Degraded after the fixed spec rolled out: %+v", c)
	}
}
