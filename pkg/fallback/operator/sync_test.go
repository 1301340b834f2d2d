package operator

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// syncFixture is one Sync against fake API servers: the informers' caches
// hold what the clients hold when Sync starts.
type syncFixture struct {
	o      *Operator
	events *record.FakeRecorder
	client *kubefake.Clientset
}

var syncTemplates = map[string]string{
	OperandKey:   "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: kube-system\nspec:\n  containers:\n  - name: kube-apiserver\n    image: a\n",
	MonitorKey:   "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver-startup-monitor\n  namespace: kube-system\nspec:\n  containers:\n  - name: monitor\n    image: a\n",
	InstallerKey: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: installer\n  namespace: steadyplane-system\nspec:\n  containers:\n  - name: installer\n    image: a\n",
}

func newSyncFixture(t *testing.T, now time.Time, obj *v1alpha1.KubeAPIServer, objs ...runtime.Object) syncFixture {
	t.Helper()
	obj.Name = v1alpha1.Name
	u, err := v1alpha1.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.GroupVersionResource: v1alpha1.Kind + "List"}, u)
	objs = append(objs, templatesOf("n", syncTemplates))
	client := kubefake.NewClientset(objs...)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	events := record.NewFakeRecorder(100)
	return syncFixture{client: client, events: events, o: &Operator{
		Client: client, API: v1alpha1.Client{Dynamic: dyn}, Recorder: events, Clock: clocktesting.NewFakeClock(now),
		Retry: RetryPolicy{Base: 10 * time.Minute, Max: 6 * time.Hour}, Topology: TopologyAuto, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		apiPods: corelisters.NewPodLister(idx).Pods(metav1.NamespaceSystem), installers: corelisters.NewPodLister(idx).Pods(v1alpha1.Namespace),
		cmLister: corelisters.NewConfigMapLister(idx).ConfigMaps(v1alpha1.Namespace), secretLister: corelisters.NewSecretLister(idx).Secrets(v1alpha1.Namespace),
	}}
}

// sync runs Sync once and returns its requeue, the Events and the status written.
func (f syncFixture) sync(t *testing.T) (time.Duration, []string, v1alpha1.KubeAPIServerStatus) {
	t.Helper()
	next, err := f.o.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var evs []string
	for len(f.events.Events) > 0 {
		evs = append(evs, <-f.events.Events)
	}
	obj, err := f.o.API.Get(context.Background(), v1alpha1.Name)
	if err != nil {
		t.Fatal(err)
	}
	return next, evs, obj.Status
}

func (f syncFixture) cause(t *testing.T, n int32) string {
	t.Helper()
	cm, err := f.client.CoreV1().ConfigMaps(v1alpha1.Namespace).Get(context.Background(), RevisionName(Operand, n), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Annotations[CauseAnnotation]
}

func templatesOf(node string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: TemplatesName(node), Namespace: v1alpha1.Namespace, Labels: map[string]string{NodeLabel: node}}, Data: data}
}

// existingRevision is revision n in the API, made from an empty spec, with
// its rendering for node "n" from templates (the fixture's when nil).
func existingRevision(t *testing.T, n int32, templates map[string]string) []runtime.Object {
	t.Helper()
	if templates == nil {
		templates = syncTemplates
	}
	rev := RevisionConfigMap(Inputs{ConfigMaps: map[string]map[string]string{}, Secrets: map[string]map[string][]byte{}}, n, "test")
	rendering, err := Render(rev, templates, "n")
	if err != nil {
		t.Fatal(err)
	}
	return []runtime.Object{rev, rendering}
}

func mirrorPod(node string, revision, fallbackFor int32, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	ann := map[string]string{staticpod.MirrorAnnotation: "x", fallback.RevisionAnnotation: itoa(revision)}
	if fallbackFor != 0 {
		ann[fallback.FallbackForRevisionAnnotation] = itoa(fallbackFor)
		ann[fallback.FallbackReasonAnnotation] = "NotReady"
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-" + node, Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": Operand}, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func TestSync(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC))
	failedAt3 := v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 3, NodeStatuses: []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 2,
		LastFailedRevision: 3, LastFailedReason: "NotReady", LastFailedTime: &t0, LastFallbackCount: 1}}}
	cases := []struct {
		name     string
		now      time.Time
		obj      v1alpha1.KubeAPIServer
		objs     []runtime.Object
		next     time.Duration
		events   []string
		latest   int32
		cause    string
		degraded string
	}{
		{"first revision", t0.Time, v1alpha1.KubeAPIServer{}, nil, 0,
			[]string{"Normal RevisionCreated revision 1: first revision"}, 1, "first revision", "AsExpected"},
		{"the spec changed: a revision, installed", t0.Time, v1alpha1.KubeAPIServer{Spec: v1alpha1.KubeAPIServerSpec{ExtraArgs: []string{"--v=2"}}},
			append(existingRevision(t, 1, nil), mirrorPod("n", 1, 0, true)), inFlightPoll,
			[]string{"Normal RevisionCreated revision 2: the spec or its ConfigMaps and Secrets changed", "Normal InstallerStarted node n: installing revision 2 (from 1; startup monitor true)"},
			2, "the spec or its ConfigMaps and Secrets changed", "AsExpected"},
		{"the node's templates changed: a revision, installed", t0.Time, v1alpha1.KubeAPIServer{},
			append(existingRevision(t, 1, map[string]string{OperandKey: syncTemplates[OperandKey] + "  hostNetwork: true\n", MonitorKey: syncTemplates[MonitorKey], InstallerKey: syncTemplates[InstallerKey]}), mirrorPod("n", 1, 0, true)), inFlightPoll,
			[]string{"Normal RevisionCreated revision 2: the templates of n changed", "Normal InstallerStarted node n: installing revision 2 (from 1; startup monitor true)"},
			2, "the templates of n changed", "AsExpected"},
		{"nothing changed: nothing made", t0.Time, v1alpha1.KubeAPIServer{},
			append(existingRevision(t, 1, nil), mirrorPod("n", 1, 0, true)), 0, nil, 1, "", "AsExpected"},
		{"a retry due", t0.Add(time.Hour), v1alpha1.KubeAPIServer{Status: failedAt3}, append(existingRevision(t, 3, nil), mirrorPod("n", 2, 3, true)), inFlightPoll,
			[]string{"Normal RevisionRetry revision 4: retry of revision 3, which failed with NotReady (fallback 1)", "Normal InstallerStarted node n: installing revision 4 (from 2; startup monitor true)"},
			4, "retry of revision 3, which failed with NotReady (fallback 1)", "NotReady"},
		{"a retry due later", t0.Add(time.Minute), v1alpha1.KubeAPIServer{Status: failedAt3}, append(existingRevision(t, 3, nil), mirrorPod("n", 2, 3, true)), 9 * time.Minute,
			nil, 3, "", "NotReady"},
		{"a missing secret: nothing made, degraded", t0.Add(time.Hour), v1alpha1.KubeAPIServer{Spec: v1alpha1.KubeAPIServerSpec{Secrets: []string{"s"}}, Status: failedAt3},
			append(existingRevision(t, 3, nil), mirrorPod("n", 2, 3, true)), 0, nil, 3, "", "InvalidInput"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newSyncFixture(t, c.now, &c.obj, c.objs...)
			next, evs, st := f.sync(t)
			if next != c.next {
				t.Errorf("next %v, want %v", next, c.next)
			}
			if !slices.Equal(evs, c.events) {
				t.Errorf("events\n got %q\nwant %q", evs, c.events)
			}
			if st.LatestAvailableRevision != c.latest {
				t.Errorf("latest %d, want %d", st.LatestAvailableRevision, c.latest)
			}
			if c.cause != "" {
				if got := f.cause(t, c.latest); got != c.cause {
					t.Errorf("cause %q, want %q", got, c.cause)
				}
			}
			if slices.ContainsFunc(evs, func(e string) bool { return strings.Contains(e, "InstallerStarted") }) {
				// The node's rendering of the revision is made before its installer.
				r, err := f.client.CoreV1().ConfigMaps(v1alpha1.Namespace).Get(context.Background(), RenderingName(Operand, c.latest, "n"), metav1.GetOptions{})
				if err != nil {
					t.Fatalf("no rendering for the node: %v", err)
				}
				if r.Annotations[TemplatesHashAnnotation] != TemplatesHash(syncTemplates) || !strings.Contains(r.Data[RevisionOperandKey], fallback.RevisionAnnotation) {
					t.Errorf("rendering %s: annotations %v, operand:\n%s", r.Name, r.Annotations, r.Data[RevisionOperandKey])
				}
			}
			if d := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded); d == nil || d.Reason != c.degraded {
				t.Errorf("Degraded %+v, want reason %s", d, c.degraded)
			}
		})
	}
}

// A node without templates cannot be installed: the sync says so in an
// Event and its error, and still writes what it observed and decided.
func TestSyncNodeWithoutTemplates(t *testing.T) {
	obj := v1alpha1.KubeAPIServer{Spec: v1alpha1.KubeAPIServerSpec{ExtraArgs: []string{"--v=2"}}}
	f := newSyncFixture(t, time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC), &obj, append(existingRevision(t, 1, nil), mirrorPod("m", 1, 0, true))...)
	_, err := f.o.Sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "node m has no templates") {
		t.Errorf("Sync: %v, want the missing templates named", err)
	}
	var evs []string
	for len(f.events.Events) > 0 {
		evs = append(evs, <-f.events.Events)
	}
	if !slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, "Warning InstallFailed node m: revision 2") }) {
		t.Errorf("events %q lack the failed install", evs)
	}
	got, err := f.o.API.Get(context.Background(), v1alpha1.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.LatestAvailableRevision != 2 || len(got.Status.NodeStatuses) != 1 || got.Status.NodeStatuses[0].CurrentRevision != 1 {
		t.Errorf("status not written: %+v", got.Status)
	}
}

// TestSyncRetriesFailedInstaller: an installer evicted (or otherwise
// failed) is made again once it has been failed for installerRetryDelay;
// the rollout would wait for its files for ever.
func TestSyncRetriesFailedInstaller(t *testing.T) {
	now := time.Date(2026, 11, 27, 21, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		failedAgo time.Duration
		retried   bool
	}{
		{"failed a minute ago", time.Minute, true},
		{"failed just now", 2 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := v1alpha1.KubeAPIServer{Status: v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 2,
				NodeStatuses: []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 1, TargetRevision: 2}}}}
			installer := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: InstallerName("n", 2), Namespace: v1alpha1.Namespace, UID: "evicted",
				CreationTimestamp: metav1.NewTime(now.Add(-tc.failedAgo - time.Second))},
				Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: ephemeral-storage.",
					ContainerStatuses: []corev1.ContainerStatus{{Name: "installer", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
						ExitCode: 137, FinishedAt: metav1.NewTime(now.Add(-tc.failedAgo))}}}}}}
			objs := append(append(existingRevision(t, 1, nil), existingRevision(t, 2, nil)...), mirrorPod("n", 1, 0, true), installer)
			f := newSyncFixture(t, now, &obj, objs...)
			_, evs, _ := f.sync(t)
			p, err := f.client.CoreV1().Pods(v1alpha1.Namespace).Get(context.Background(), InstallerName("n", 2), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			said := slices.ContainsFunc(evs, func(e string) bool {
				return strings.HasPrefix(e, "Warning InstallerFailed node n: the installer of revision 2 failed (The node was low on resource")
			})
			if retried := p.Status.Phase != corev1.PodFailed; retried != tc.retried || said != tc.retried {
				t.Errorf("installer made again: %v, Event said so: %v (events %q); want %v", retried, said, evs, tc.retried)
			}
		})
	}
}
