package release

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
)

// TestUpgradeRefusesBeforeAnythingChanges: each refusal leaves the state
// file as it was.
func TestUpgradeRefusesBeforeAnythingChanges(t *testing.T) {
	v1 := Binary{Path: "/d/bin/a", Release: "v0.9.1"}
	v2 := Binary{Path: "/d/bin/b", Release: "v0.9.2"}
	tests := []struct {
		name    string
		st      *State
		o       UpgradeOptions
		wantErr string
	}{
		{"no up ran here", nil, UpgradeOptions{Binary: "/bin/true"}, "has no release yet"},
		{"a move under way", &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: Me()}, UpgradeOptions{Binary: "/bin/true"}, "a move to release v0.9.2 is under way"},
		{"rollback with nothing before", &State{Current: v1}, UpgradeOptions{Rollback: true}, "no release before v0.9.1"},
		{"no binary", &State{Current: v1}, UpgradeOptions{}, "--binary names"},
		{"a binary whose version is no release's", &State{Current: v1}, UpgradeOptions{Binary: "/bin/true"}, "is no steadyplane binary of a release"},
		{"a binary that is not there", &State{Current: v1}, UpgradeOptions{Binary: "/nonexistent/steadyplane"}, "no such file"},
	}
	for _, tc := range tests {
		dir := t.TempDir()
		if tc.st != nil {
			if err := WriteState(dir, tc.st); err != nil {
				t.Fatal(err)
			}
		}
		tc.o.DataDir = dir
		err := Upgrade(context.Background(), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.wantErr)
		}
		if got, _ := ReadState(dir); (got == nil) != (tc.st == nil) || (got != nil && got.Phase != tc.st.Phase) {
			t.Errorf("%s: the state changed to %+v", tc.name, got)
		}
	}
}

// TestWaitMove follows a move's state file to its end.
func TestWaitMove(t *testing.T) {
	v1 := Binary{Path: "/d/bin/a", Release: "v0.9.1"}
	v2 := Binary{Path: "/d/bin/b", Release: "v0.9.2"}
	tests := []struct {
		name    string
		final   *State
		wantErr string
		wantOut string
	}{
		{"done", &State{Current: v2, Previous: &v1, Phase: Done}, "", "runs release v0.9.2"},
		{"failed", &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonStartFailed, Message: "etcd: no quorum"}, "release v0.9.2 failed (StartFailed): etcd: no quorum", ""},
		{"its up died", &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: Process{Pid: 1 << 30}}, "exited before it was up", ""},
		{"not started: up cannot hand over", &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonUnsupported, Message: "up runs its control plane as child processes"}, "not started: up runs its control plane", ""},
		{"nothing happens", &State{Current: v1, Target: &v2, Phase: Pending}, "not up within", ""},
	}
	for _, tc := range tests {
		dir := t.TempDir()
		if err := WriteState(dir, tc.final); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := waitMove(context.Background(), dir, v2, 2*time.Second, &out)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: %v, want error %q", tc.name, err, tc.wantErr)
		}
		if !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("%s: output %q lacks %q", tc.name, out.String(), tc.wantOut)
		}
	}
}

func TestRolledOut(t *testing.T) {
	progressing := func(s metav1.ConditionStatus) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Status: s}}
	}
	nodes := func(revs ...int32) []v1alpha1.NodeStatus {
		var out []v1alpha1.NodeStatus
		for i, r := range revs {
			out = append(out, v1alpha1.NodeStatus{NodeName: fmt.Sprint("s", i), CurrentRevision: r})
		}
		return out
	}
	tests := []struct {
		name   string
		status v1alpha1.KubeAPIServerStatus
		want   bool
	}{
		{"every node on the latest, nothing in progress", v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 3, NodeStatuses: nodes(3, 3), Conditions: progressing(metav1.ConditionFalse)}, true},
		{"one node behind", v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 3, NodeStatuses: nodes(3, 2), Conditions: progressing(metav1.ConditionFalse)}, false},
		{"in progress", v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 3, NodeStatuses: nodes(3), Conditions: progressing(metav1.ConditionTrue)}, false},
		{"no condition yet", v1alpha1.KubeAPIServerStatus{LatestAvailableRevision: 3, NodeStatuses: nodes(3)}, false},
		{"no revision yet", v1alpha1.KubeAPIServerStatus{Conditions: progressing(metav1.ConditionFalse)}, false},
	}
	for _, tc := range tests {
		if got := RolledOut(&v1alpha1.KubeAPIServer{Status: tc.status}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAliveNamesOneProcess(t *testing.T) {
	me := Me()
	if !Alive(me) {
		t.Fatalf("this process (%+v) is not alive", me)
	}
	if Alive(Process{Pid: me.Pid, Ticks: me.Ticks + 1}) {
		t.Error("this pid with another start time is alive")
	}
	if Alive(Process{}) {
		t.Error("no process is alive")
	}
}

// TestUpgradeFromRefuses: from a kubeconfig, what cannot be done is said
// before anything is read or sent.
func TestUpgradeFromRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    UpgradeOptions
		says string
	}{
		{"a rollback", UpgradeOptions{Kubeconfig: "/nonexistent/admin.kubeconfig", Rollback: true}, "run it there (--data-dir)"},
		{"no binary", UpgradeOptions{Kubeconfig: "/nonexistent/admin.kubeconfig"}, "--binary names"},
		{"a binary that is none", UpgradeOptions{Kubeconfig: "/nonexistent/admin.kubeconfig", Binary: "/nonexistent/steadyplane"}, "no such file"},
	} {
		if err := Upgrade(context.Background(), tc.o); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: Upgrade = %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
}
