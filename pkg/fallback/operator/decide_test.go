package operator

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
)

func TestObserveNode(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)
	now := metav1.NewTime(t0.Add(time.Minute))
	installing := v1alpha1.NodeStatus{NodeName: "n", CurrentRevision: 2, TargetRevision: 3}
	cases := []struct {
		name      string
		ns        v1alpha1.NodeStatus
		m         *Mirror
		installed time.Time
		want      v1alpha1.NodeStatus
		event     string
	}{
		{"no mirror pod: nothing known", installing, nil, time.Time{}, installing, ""},
		{"the old revision still runs", installing, &Mirror{Revision: 2, Ready: true, Created: t0.Add(-time.Hour)}, t0, installing, ""},
		{"the target runs, not Ready yet", installing, &Mirror{Revision: 3}, t0, installing, ""},
		{"the target runs Ready: rolled out, fallbacks forgotten", v1alpha1.NodeStatus{NodeName: "n", CurrentRevision: 2, TargetRevision: 3, LastFallbackCount: 2},
			&Mirror{Revision: 3, Ready: true}, t0, v1alpha1.NodeStatus{NodeName: "n", CurrentRevision: 3}, "RevisionRolledOut"},
		{"a fallback from the target is recorded", installing, &Mirror{Revision: 2, FallbackFor: 3, Reason: "CrashLooping", Message: "exit code 1"}, t0,
			v1alpha1.NodeStatus{NodeName: "n", CurrentRevision: 2, LastFailedRevision: 3, LastFailedReason: "CrashLooping", LastFailedTime: &now, LastFallbackCount: 1, LastFailedRevisionErrors: []string{"exit code 1"}},
			"RevisionFallback"},
		{"an old fallback is not recorded twice", v1alpha1.NodeStatus{NodeName: "n", CurrentRevision: 2, LastFailedRevision: 3, LastFallbackCount: 1},
			&Mirror{Revision: 2, FallbackFor: 3, Ready: true}, time.Time{}, v1alpha1.NodeStatus{NodeName: "n", CurrentRevision: 2, LastFailedRevision: 3, LastFallbackCount: 1}, ""},
		{"a second failure counts up", v1alpha1.NodeStatus{NodeName: "n", CurrentRevision: 2, TargetRevision: 4, LastFailedRevision: 3, LastFallbackCount: 1},
			&Mirror{Revision: 2, FallbackFor: 4, Reason: "NotReady"}, t0,
			v1alpha1.NodeStatus{NodeName: "n", CurrentRevision: 2, LastFailedRevision: 4, LastFailedReason: "NotReady", LastFailedTime: &now, LastFallbackCount: 2, LastFailedRevisionErrors: []string{""}},
			"RevisionFallback"},
		{"nothing in flight: current follows what runs Ready", v1alpha1.NodeStatus{NodeName: "n"}, &Mirror{Revision: 1, Ready: true}, time.Time{}, v1alpha1.NodeStatus{NodeName: "n", CurrentRevision: 1}, ""},
		{"another revision's mirror made after the install: interrupted", installing, &Mirror{Revision: 2, Ready: true, Created: t0.Add(time.Second)}, t0,
			v1alpha1.NodeStatus{NodeName: "n", CurrentRevision: 2}, "RolloutInterrupted"},
		{"the same, while the installer runs: wait", installing, &Mirror{Revision: 2, Ready: true, Created: t0.Add(time.Second)}, time.Time{}, installing, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, evs := ObserveNode(c.ns, c.m, c.installed, now)
			if !equalStatus(got, c.want) {
				t.Errorf("status\n got %+v\nwant %+v", got, c.want)
			}
			if (c.event == "") != (len(evs) == 0) || (c.event != "" && evs[0].Reason != c.event) {
				t.Errorf("events %+v, want %q", evs, c.event)
			}
		})
	}
}

func equalStatus(a, b v1alpha1.NodeStatus) bool {
	ta, tb := a.LastFailedTime, b.LastFailedTime
	a.LastFailedTime, b.LastFailedTime = nil, nil
	return (ta == nil) == (tb == nil) && (ta == nil || ta.Equal(tb)) &&
		strings.Join(a.LastFailedRevisionErrors, "|") == strings.Join(b.LastFailedRevisionErrors, "|") &&
		a.NodeName == b.NodeName && a.CurrentRevision == b.CurrentRevision && a.TargetRevision == b.TargetRevision &&
		a.LastFailedRevision == b.LastFailedRevision && a.LastFailedReason == b.LastFailedReason && a.LastFallbackCount == b.LastFallbackCount
}

func TestNextInstall(t *testing.T) {
	n := func(name string, current, target, failed int32) v1alpha1.NodeStatus {
		return v1alpha1.NodeStatus{NodeName: name, CurrentRevision: current, TargetRevision: target, LastFailedRevision: failed}
	}
	cases := []struct {
		name   string
		nodes  []v1alpha1.NodeStatus
		latest int32
		want   string
	}{
		{"all at latest", []v1alpha1.NodeStatus{n("a", 3, 0, 0), n("b", 3, 0, 0)}, 3, ""},
		{"first behind node", []v1alpha1.NodeStatus{n("a", 3, 0, 0), n("b", 2, 0, 0), n("c", 2, 0, 0)}, 3, "b"},
		{"one at a time", []v1alpha1.NodeStatus{n("a", 3, 0, 0), n("b", 2, 3, 0), n("c", 2, 0, 0)}, 3, ""},
		{"a newer revision supersedes one in flight on that node", []v1alpha1.NodeStatus{n("a", 2, 3, 0), n("b", 2, 0, 0)}, 4, "a"},
		{"the rollout stops at a failed node", []v1alpha1.NodeStatus{n("a", 2, 0, 3), n("b", 2, 0, 0)}, 3, ""},
		{"a newer revision after a failure goes on", []v1alpha1.NodeStatus{n("a", 2, 0, 3)}, 4, "a"},
		{"no nodes", nil, 3, ""},
	}
	for _, c := range cases {
		got, ok := NextInstall(c.nodes, c.latest)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: %q %v, want %q", c.name, got, ok, c.want)
		}
	}
}

func TestPrunable(t *testing.T) {
	n := func(name string, current, target, failed int32) v1alpha1.NodeStatus {
		return v1alpha1.NodeStatus{NodeName: name, CurrentRevision: current, TargetRevision: target, LastFailedRevision: failed}
	}
	all := []int{1, 2, 3, 4, 5, 6, 7, 8}
	cases := []struct {
		name string
		keep int
		st   v1alpha1.KubeAPIServerStatus
		want string
	}{
		{"no nodes yet: all but the newest keep", 3, v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 8}, "[1 2 3 4 5]"},
		{"no nodes, keep 0: the latest stays", 0, v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 8}, "[1 2 3 4 5 6 7]"},
		{"a node's current and last failed revisions stay", 2, v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 8,
			NodeStatuses: []v1alpha1.NodeStatus{n("a", 3, 0, 5)}}, "[1 2 4 6]"},
		{"protected on any node is protected", 2, v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 8,
			NodeStatuses: []v1alpha1.NodeStatus{n("a", 8, 0, 5), n("b", 2, 0, 0)}}, "[1 3 4 6]"},
		// The latest supersedes it: NextInstall installs the latest there next.
		{"a target older than the latest is not kept for it", 2, v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 8,
			NodeStatuses: []v1alpha1.NodeStatus{n("a", 2, 4, 0)}}, "[1 3 4 5 6]"},
		{"nothing beyond keep", 8, v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 8, NodeStatuses: []v1alpha1.NodeStatus{n("a", 1, 0, 0)}}, "[]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(Prunable(all, c.keep, c.st)); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestRetryAt(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC))
	p := RetryPolicy{Base: 10 * time.Minute, Max: 6 * time.Hour}
	cases := []struct {
		reason string
		count  int32
		ok     bool
		after  time.Duration
	}{
		{"CrashLooping", 1, false, 0},
		{"NeverStartedUp", 3, false, 0},
		{"EtcdUnhealthy", 1, true, 10 * time.Minute},
		{"NotReady", 2, true, 20 * time.Minute},
		{"Unhealthy", 3, true, 40 * time.Minute},
		{"NotReady", 20, true, 6 * time.Hour},
	}
	for _, c := range cases {
		at, ok := p.RetryAt(v1alpha1.NodeStatus{LastFailedReason: c.reason, LastFallbackCount: c.count, LastFailedTime: &t0})
		if ok != c.ok || (ok && at.Sub(t0.Time) != c.after) {
			t.Errorf("%s after %d fallbacks: %v %v, want %v after %v", c.reason, c.count, at, ok, c.ok, c.after)
		}
	}
}

func TestConditions(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC))
	p := RetryPolicy{Base: 10 * time.Minute, Max: 6 * time.Hour}
	get := func(cs []metav1.Condition, typ string) metav1.Condition {
		for _, c := range cs {
			if c.Type == typ {
				return c
			}
		}
		t.Fatalf("no %s", typ)
		return metav1.Condition{}
	}
	cases := []struct {
		name                             string
		st                               v1alpha1.KubeAPIServerStatus
		available, progressing, degraded metav1.ConditionStatus
		degradedReason, message          string
	}{
		{"settled", v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 1, NodeStatuses: []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 1}}},
			"True", "False", "False", "AsExpected", ""},
		{"rolling out", v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 2, NodeStatuses: []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 1, TargetRevision: 2}}},
			"True", "True", "False", "AsExpected", ""},
		{"crash loop: degraded, not retried", v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 2, NodeStatuses: []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 1,
			LastFailedRevision: 2, LastFailedReason: "CrashLooping", LastFailedTime: &t0, LastFallbackCount: 1, LastFailedRevisionErrors: []string{"unknown flag: --no-such-flag"}}}},
			"True", "False", "True", "CrashLooping", "unknown flag: --no-such-flag. Not retried"},
		{"etcd: degraded, retried", v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 2, NodeStatuses: []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 1,
			LastFailedRevision: 2, LastFailedReason: "EtcdUnhealthy", LastFailedTime: &t0, LastFallbackCount: 1}}},
			"True", "False", "True", "EtcdUnhealthy", "Retrying as a new revision at 2026-11-23T05:10:00Z"},
		{"a good revision after the failure clears it", v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 3, NodeStatuses: []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 3,
			LastFailedRevision: 2, LastFailedReason: "CrashLooping", LastFailedTime: &t0}}},
			"True", "False", "False", "AsExpected", ""},
		{"nothing runs", v1alpha1.KubeAPIServerStatus{}, "False", "False", "False", "AsExpected", ""},
	}
	for _, c := range cases {
		cs := Conditions(c.st, p, 1)
		a, pr, d := get(cs, v1alpha1.ConditionAvailable), get(cs, v1alpha1.ConditionProgressing), get(cs, v1alpha1.ConditionDegraded)
		if a.Status != c.available || pr.Status != c.progressing || d.Status != c.degraded || d.Reason != c.degradedReason || !strings.Contains(d.Message, c.message) {
			t.Errorf("%s: Available %s Progressing %s Degraded %s %s %q", c.name, a.Status, pr.Status, d.Status, d.Reason, d.Message)
		}
	}
}

func TestInputsHash(t *testing.T) {
	base := Inputs{ConfigMaps: map[string]map[string]string{"c": {"a": "1"}}, Secrets: map[string]map[string][]byte{}}
	same := Inputs{ConfigMaps: map[string]map[string]string{"c": {"a": "1"}}, Secrets: map[string]map[string][]byte{}}
	if base.Hash() != same.Hash() {
		t.Error("equal inputs hash differently")
	}
	// Revisions made before binaryData was copied must keep their hash.
	if noBinary := (Inputs{ConfigMaps: base.ConfigMaps, Secrets: base.Secrets, ConfigMapsBinary: map[string]map[string][]byte{}}); noBinary.Hash() != base.Hash() {
		t.Error("an empty ConfigMapsBinary changes the hash")
	}
	for name, in := range map[string]Inputs{
		"extra arg": {Spec: v1alpha1.KubeAPIServerSpec{ExtraArgs: []string{"--v=2"}}, ConfigMaps: base.ConfigMaps, Secrets: base.Secrets},
		"configmap": {ConfigMaps: map[string]map[string]string{"c": {"a": "2"}}, Secrets: base.Secrets},
		"secret":    {ConfigMaps: base.ConfigMaps, Secrets: map[string]map[string][]byte{"s": {"k": []byte("v")}}},
		"binary":    {ConfigMaps: base.ConfigMaps, Secrets: base.Secrets, ConfigMapsBinary: map[string]map[string][]byte{"c": {"k": {0xff}}}},
	} {
		if in.Hash() == base.Hash() {
			t.Errorf("a changed %s hashes the same", name)
		}
	}
}

func TestStaleTemplates(t *testing.T) {
	cases := []struct {
		name          string
		now, rendered map[string]string
		want          []string
	}{
		{"nothing rendered yet", map[string]string{"a": "1"}, nil, nil},
		{"as rendered", map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1", "b": "2"}, nil},
		{"one changed", map[string]string{"a": "1", "b": "3"}, map[string]string{"a": "1", "b": "2"}, []string{"b"}},
		{"two changed, sorted", map[string]string{"c": "9", "a": "8"}, map[string]string{"c": "1", "a": "2"}, []string{"a", "c"}},
		{"a node not rendered for the latest is installed from its templates as they are", map[string]string{"a": "1", "new": "5"}, map[string]string{"a": "1"}, nil},
		{"a node whose templates are gone is not stale", map[string]string{}, map[string]string{"gone": "1"}, nil},
	}
	for _, c := range cases {
		if got := StaleTemplates(c.now, c.rendered); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestNextRevision(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC))
	p := RetryPolicy{Base: 10 * time.Minute, Max: 6 * time.Hour}
	failed := func(revision int32, reason string, at *metav1.Time) []v1alpha1.NodeStatus {
		return []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 2, LastFailedRevision: revision, LastFailedReason: reason, LastFailedTime: at, LastFallbackCount: 1}}
	}
	retry := Cause{Kind: CauseRetry, Revision: 3, Reason: "NotReady", Fallbacks: 1}
	missing := errors.New("spec.secrets: Secret steadyplane-system/s: not found")
	cases := []struct {
		name string
		s    RevisionState
		now  time.Time
		want RevisionDecision
	}{
		{"no revision yet: the first", RevisionState{InputHash: "h"}, t0.Time, RevisionDecision{Cause: Cause{Kind: CauseFirst}, Revision: 1}},
		{"the inputs changed", RevisionState{Latest: 3, LatestHash: "old", InputHash: "new", Nodes: failed(0, "", nil)}, t0.Time,
			RevisionDecision{Cause: Cause{Kind: CauseInputsChanged}, Revision: 4}},
		{"a change wins over a due retry", RevisionState{Latest: 3, LatestHash: "old", InputHash: "new", Nodes: failed(3, "NotReady", &t0)}, t0.Add(time.Hour),
			RevisionDecision{Cause: Cause{Kind: CauseInputsChanged}, Revision: 4}},
		{"a node's templates changed", RevisionState{Latest: 3, LatestHash: "h", InputHash: "h", Nodes: failed(0, "", nil), StaleTemplates: []string{"a", "b"}}, t0.Time,
			RevisionDecision{Cause: Cause{Kind: CauseTemplatesChanged, Nodes: []string{"a", "b"}}, Revision: 4}},
		{"a change of the spec wins over templates", RevisionState{Latest: 3, LatestHash: "old", InputHash: "new", StaleTemplates: []string{"a"}}, t0.Time,
			RevisionDecision{Cause: Cause{Kind: CauseInputsChanged}, Revision: 4}},
		{"changed templates win over a retry not yet due: they may be the repair", RevisionState{Latest: 3, LatestHash: "h", InputHash: "h", Nodes: failed(3, "NotReady", &t0), StaleTemplates: []string{"n"}},
			t0.Add(time.Minute), RevisionDecision{Cause: Cause{Kind: CauseTemplatesChanged, Nodes: []string{"n"}}, Revision: 4}},
		{"changed templates wait for whole inputs", RevisionState{Latest: 3, LatestHash: "h", InputHash: "h", InputErr: missing, StaleTemplates: []string{"n"}}, t0.Time,
			RevisionDecision{}},
		{"a retry due now", RevisionState{Latest: 3, LatestHash: "h", InputHash: "h", Nodes: failed(3, "NotReady", &t0)}, t0.Add(10 * time.Minute),
			RevisionDecision{Cause: retry, Revision: 4}},
		{"a retry overdue", RevisionState{Latest: 3, LatestHash: "h", InputHash: "h", Nodes: failed(3, "NotReady", &t0)}, t0.Add(time.Hour),
			RevisionDecision{Cause: retry, Revision: 4}},
		{"a retry due later: look again then", RevisionState{Latest: 3, LatestHash: "h", InputHash: "h", Nodes: failed(3, "NotReady", &t0)}, t0.Add(time.Minute),
			RevisionDecision{RetryIn: 9 * time.Minute}},
		{"a crash loop is not retried", RevisionState{Latest: 3, LatestHash: "h", InputHash: "h", Nodes: failed(3, "CrashLooping", &t0)}, t0.Add(time.Hour),
			RevisionDecision{}},
		{"a failure without a time is not retried", RevisionState{Latest: 3, LatestHash: "h", InputHash: "h", Nodes: failed(3, "NotReady", nil)}, t0.Add(time.Hour),
			RevisionDecision{}},
		{"an older revision's failure is not retried", RevisionState{Latest: 3, LatestHash: "h", InputHash: "h", Nodes: failed(2, "NotReady", &t0)}, t0.Add(time.Hour),
			RevisionDecision{}},
		{"nothing changed, nothing failed", RevisionState{Latest: 3, LatestHash: "h", InputHash: "h", Nodes: failed(0, "", nil)}, t0.Time, RevisionDecision{}},
		{"no nodes yet", RevisionState{Latest: 1, LatestHash: "h", InputHash: "h"}, t0.Time, RevisionDecision{}},
		{"incomplete inputs: no first revision", RevisionState{InputHash: "h", InputErr: missing}, t0.Time, RevisionDecision{}},
		{"incomplete inputs: no change", RevisionState{Latest: 3, LatestHash: "old", InputHash: "new", InputErr: missing}, t0.Time, RevisionDecision{}},
		{"incomplete inputs: no retry, and none waited for", RevisionState{Latest: 3, LatestHash: "h", InputHash: "h", InputErr: missing, Nodes: failed(3, "NotReady", &t0)},
			t0.Add(time.Minute), RevisionDecision{}},
	}
	for _, c := range cases {
		got := NextRevision(c.s, p, c.now)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
		if got.New() != (c.want.Cause.Kind != CauseNone) {
			t.Errorf("%s: New() %v", c.name, got.New())
		}
	}
}

// The texts are read by users (the cause annotation, Events) and by the
// end-to-end tests (the Event reasons): they do not change.
func TestCause(t *testing.T) {
	cases := []struct {
		c            Cause
		text, reason string
	}{
		{Cause{}, "", ""},
		{Cause{Kind: CauseFirst}, "first revision", "RevisionCreated"},
		{Cause{Kind: CauseInputsChanged}, "the spec or its ConfigMaps and Secrets changed", "RevisionCreated"},
		{Cause{Kind: CauseTemplatesChanged, Nodes: []string{"a", "b"}}, "the templates of a, b changed", "RevisionCreated"},
		{Cause{Kind: CauseRetry, Revision: 3, Reason: "EtcdUnhealthy", Fallbacks: 2}, "retry of revision 3, which failed with EtcdUnhealthy (fallback 2)", "RevisionRetry"},
	}
	for _, c := range cases {
		if got := fmt.Sprintf("%s", c.c); got != c.text {
			t.Errorf("%+v: text %q, want %q", c.c, got, c.text)
		}
		if got := c.c.EventReason(); got != c.reason {
			t.Errorf("%+v: reason %q, want %q", c.c, got, c.reason)
		}
	}
}

func TestRequeueAfter(t *testing.T) {
	idle := []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 2}}
	installing := []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 2, TargetRevision: 3}}
	cases := []struct {
		name    string
		retryIn time.Duration
		nodes   []v1alpha1.NodeStatus
		want    time.Duration
	}{
		{"nothing to wait for", 0, idle, 0},
		{"a retry later", time.Minute, idle, time.Minute},
		{"in flight: poll", 0, installing, inFlightPoll},
		{"in flight: poll before a later retry", time.Minute, installing, inFlightPoll},
		{"in flight: a retry sooner than the poll", time.Second, installing, time.Second},
	}
	for _, c := range cases {
		if got := requeueAfter(c.retryIn, c.nodes); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestConditionsInvalidInput(t *testing.T) {
	st := v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 1, NodeStatuses: []v1alpha1.NodeStatus{{NodeName: "n", CurrentRevision: 1}}}
	for _, inputErr := range []error{nil, errors.New("spec.configMaps: ConfigMap steadyplane-system/c: not found")} {
		cs := conditions(st, RetryPolicy{}, 1, inputErr)
		if want := Conditions(st, RetryPolicy{}, 1); inputErr == nil && fmt.Sprint(cs) != fmt.Sprint(want) {
			t.Errorf("valid inputs: %+v, want %+v", cs, want)
		}
		for _, c := range cs {
			if c.Type == v1alpha1.ConditionDegraded && inputErr != nil &&
				(c.Status != metav1.ConditionTrue || c.Reason != "InvalidInput" || c.Message != inputErr.Error()) {
				t.Errorf("invalid inputs: %+v", c)
			}
		}
	}
}

func TestAllAt(t *testing.T) {
	st := v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 4, NodeStatuses: []v1alpha1.NodeStatus{
		{NodeName: "a", CurrentRevision: 4}, {NodeName: "b", CurrentRevision: 4}, {NodeName: "c", CurrentRevision: 3, TargetRevision: 4}}}
	for _, c := range []struct {
		names []string
		n     int32
		want  bool
	}{
		{[]string{"a", "b"}, 4, true},
		{[]string{"a", "b", "c"}, 4, false}, // c is still rolling
		{[]string{"a", "missing"}, 4, false},
		{[]string{"a"}, 3, false},
		{nil, 4, true},
	} {
		if got := AllAt(st, c.names, c.n); got != c.want {
			t.Errorf("AllAt(%v, %d) = %v", c.names, c.n, got)
		}
	}
	if s := Summary(st); !strings.Contains(s, "latest 4: a at 4 (target 0, failed 0 )") || !strings.Contains(s, "c at 3 (target 4") {
		t.Errorf("Summary: %q", s)
	}
}
