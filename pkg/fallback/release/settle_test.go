package release

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCrashLooping(t *testing.T) {
	run := func(name, uid string, restarts int32) ComponentRun {
		return ComponentRun{Name: name, UID: uid, Restarts: restarts, LastEnd: "exit code 1: boom"}
	}
	base := []ComponentRun{run("etcd-n", "e1", 0), run("kube-scheduler-n", "s1", 3)}
	for _, tc := range []struct {
		name string
		now  []ComponentRun
		want string // the component named, "" for none
	}{
		{"nothing restarted", base, ""},
		{"one restart is no loop (a lost lease)", []ComponentRun{run("etcd-n", "e1", 1), run("kube-scheduler-n", "s1", 3)}, ""},
		{"two restarts are", []ComponentRun{run("etcd-n", "e1", 0), run("kube-scheduler-n", "s1", 5)}, "kube-scheduler-n"},
		{"counted from its base", []ComponentRun{run("etcd-n", "e1", 0), run("kube-scheduler-n", "s1", 4)}, ""},
		{"a pod made since counts from zero", []ComponentRun{run("etcd-n", "e1", 0), run("kube-apiserver-n", "a2", 2)}, "kube-apiserver-n"},
		{"a pod gone is no crash", []ComponentRun{run("etcd-n", "e1", 0)}, ""},
		{"backing off since before the base", []ComponentRun{run("etcd-n", "e1", 0), {Name: "kube-scheduler-n", UID: "s1", Restarts: 3, BackingOff: true, LastEnd: "exit code 1: boom"}}, "kube-scheduler-n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CrashLooping(base, tc.now, SettleWindow)
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("CrashLooping = %v; want none", got)
			case tc.want != "" && (got == nil || got.Component != tc.want):
				t.Errorf("CrashLooping = %v; want %s", got, tc.want)
			case got != nil && !strings.Contains(got.Error(), "exit code 1: boom"):
				t.Errorf("%q does not say how it last ended", got.Error())
			}
		})
	}
}

func TestSettleStep(t *testing.T) {
	start := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		// looks are what each step's Observe returns (nil: it fails),
		// one per second.
		looks    [][]ComponentRun
		done     bool
		fails    bool // a crash loop, or an agent that never answers
		atStep   int  // the step that ends it (0-based)
		maxSteps int
	}{
		{"quiet for the window", repeat([]ComponentRun{{Name: "etcd-n", UID: "e"}}, 22), true, false, 20, 22},
		{"crash loop", [][]ComponentRun{{{Name: "etcd-n", UID: "e"}}, {{Name: "etcd-n", UID: "e", Restarts: 1}}, {{Name: "etcd-n", UID: "e", Restarts: 2}}}, false, true, 2, 3},
		{"an agent that never answers fails the move", repeat(nil, 62), false, true, 60, 62},
		{"the agent not answering delays the start and the end", append([][]ComponentRun{nil, nil}, repeat([]ComponentRun{{Name: "etcd-n", UID: "e"}}, 23)...), true, false, 22, 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step := 0
			s := &Settle{Window: SettleWindow,
				Now: func() time.Time { return start.Add(time.Duration(step) * time.Second) },
				Observe: func(context.Context) ([]ComponentRun, error) {
					if tc.looks[step] == nil {
						return nil, errors.New("connection refused")
					}
					return tc.looks[step], nil
				}}
			for ; step < tc.maxSteps; step++ {
				done, err := s.Step(context.Background())
				if done || err != nil {
					if done != tc.done || (err != nil) != tc.fails || step != tc.atStep {
						t.Fatalf("step %d: done %v, err %v; want done %v, failed %v at step %d", step, done, err, tc.done, tc.fails, tc.atStep)
					}
					return
				}
			}
			t.Fatalf("not over after %d steps", tc.maxSteps)
		})
	}
}

func repeat(r []ComponentRun, n int) [][]ComponentRun {
	out := make([][]ComponentRun, n)
	for i := range out {
		out[i] = r
	}
	return out
}

func TestStartFailedSaysCrashLoop(t *testing.T) {
	self := Binary{Path: "/d/bin/steadyplane-b", Release: "v0.2.0"}
	me := Process{Pid: 7, Ticks: 9}
	st := &State{Current: Binary{Path: "/d/bin/steadyplane-a", Release: "v0.1.0"}, Target: &self, Phase: Starting, StartedBy: me, Settling: true}
	next := StartFailed(st, self, me, &CrashLoopError{Component: "kube-scheduler-n", Restarts: 2, Window: SettleWindow})
	if next == nil || next.Phase != Failed || next.Settling || next.Reason != ReasonCrashLoop || !strings.Contains(next.Message, "kube-scheduler-n") {
		t.Errorf("StartFailed on a crash loop = %+v; want Failed (no longer settling), CrashLoop naming the component", next)
	}
	if next := StartFailed(st, self, me, errors.New("etcd did not start")); next == nil || next.Reason != ReasonStartFailed {
		t.Errorf("StartFailed on another error = %+v; want StartFailed", next)
	}
}

// TestSettlingEndsWithItsPhase: a move that was settling and ends any way
// but Up leaves no settling behind, and an up that died while settling is
// said to have died then.
func TestSettlingEndsWithItsPhase(t *testing.T) {
	cur := Binary{Path: "/d/bin/steadyplane-a", Release: "v0.1.0"}
	target := Binary{Path: "/d/bin/steadyplane-b", Release: "v0.2.0"}
	dead := Process{Pid: 7, Ticks: 9}
	st := &State{Current: cur, Target: &target, Phase: Starting, StartedBy: dead, Settling: true}
	exists := func(string) bool { return true }
	d := Start(st, cur, Process{Pid: 8, Ticks: 10}, exists, func(Process) bool { return false })
	if d.Write == nil || d.Write.Phase != Failed || d.Write.Settling || !strings.Contains(d.Write.Message, "while it settled") {
		t.Errorf("Start after an up that died settling wrote %+v; want Failed, no longer settling, saying it died while it settled", d.Write)
	}
	if next := Requeue(st, dead); next == nil || next.Phase != Pending || next.Settling {
		t.Errorf("Requeue of a settling move = %+v; want Pending, no longer settling", next)
	}
}
