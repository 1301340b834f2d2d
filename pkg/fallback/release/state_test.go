package release

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestStart(t *testing.T) {
	v1 := Binary{Path: "/d/bin/steadyplane-aaa", Release: "v0.9.1"}
	v2 := Binary{Path: "/d/bin/steadyplane-bbb", Release: "v0.9.2"}
	v2rebuilt := Binary{Path: "/d/bin/steadyplane-ccc", Release: "v0.9.2"}
	v0 := Binary{Path: "/d/bin/steadyplane-000", Release: "v0.8.0"}
	dev := Binary{Path: "/d/bin/steadyplane-ddd", Release: "v0.0.0-dev"}
	me := Process{Pid: 42, Ticks: 1000}
	dead := Process{Pid: 7, Ticks: 500}
	other := Process{Pid: 99, Ticks: 900}
	reused := Process{Pid: 99, Ticks: 10} // pid 99 now names another process
	all := func(string) bool { return true }
	onlyV1 := func(p string) bool { return p == v1.Path }
	tests := []struct {
		name      string
		st        *State
		self      Binary
		exists    func(string) bool
		wantRun   Binary
		wantWrite *State
		wantNote  string
	}{
		{"a new data directory: this binary, recorded", nil, v1, all, v1, &State{Current: v1}, ""},
		{"the current binary again", &State{Current: v1, Phase: Done}, v1, all, v1, nil, ""},
		{"a pending move starts its target, marked by this process", &State{Current: v1, Target: &v2, Phase: Pending}, v1, all,
			v2, &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: me}, "moving to release v0.9.2"},
		{"a pending move whose binary is gone is dropped: this one runs", &State{Current: v1, Target: &v2, Phase: Pending}, v1, onlyV1, v1, nil, ""},
		{"the target's first start goes on", &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: me}, v2, all, v2, nil, ""},
		{"the target's start exited; up started again by hand or a service manager", &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: dead}, v1, all,
			v1, &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonExited, Message: "up of release v0.9.2 exited before it was up"}, "release v0.9.2 failed (Exited"},
		{"the target's start exited; the target started again is not its attempt", &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: dead}, v2, all,
			v1, &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonExited, Message: "up of release v0.9.2 exited before it was up"}, "running v0.9.1"},
		{"another up runs the target's first start: this one goes on, to be refused by the lock", &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: other}, v1, all, v1, nil, ""},
		{"the attempt's pid names another process after a reboot: the attempt failed", &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: reused}, v1, all,
			v1, &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonExited, Message: "up of release v0.9.2 exited before it was up"}, "failed"},
		{"after a failed move, the current binary", &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonExited}, v1, all, v1, nil, ""},
		{"the failed target started by hand (a unit's binary) runs the current one", &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonExited}, v2, all,
			v1, nil, "runs release v0.9.1"},
		{"the binary moved away from by a rollback runs the current one", &State{Current: v1, Previous: &v2, Phase: Done}, v2, all, v1, nil, "runs release v0.9.1"},
		{"an older binary started by hand runs the current one", &State{Current: v1, Phase: Done}, v0, all, v1, nil, "this data directory runs release v0.9.1"},
		{"a newer binary started by hand is a move, watched", &State{Current: v1, Phase: Done}, v2, all,
			v2, &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: me}, "moving by hand from release v0.9.1 to v0.9.2"},
		{"a rebuild of the same release is a move", &State{Current: v2, Previous: &v1, Phase: Done}, v2rebuilt, all,
			v2rebuilt, &State{Current: v2, Previous: &v1, Target: &v2rebuilt, Phase: Starting, StartedBy: me}, "moving by hand"},
		{"a development build over a release is a move", &State{Current: v1, Phase: Done}, dev, all,
			dev, &State{Current: v1, Target: &dev, Phase: Starting, StartedBy: me}, "moving by hand"},
		{"the current binary is gone: this one runs", &State{Current: v2, Phase: Done}, v0, onlyV1, v0, &State{Current: v0, Previous: &v2}, ""},
	}
	for _, tc := range tests {
		alive := func(p Process) bool { return p == me || p == other }
		d := Start(tc.st, tc.self, me, tc.exists, alive)
		if d.Run != tc.wantRun {
			t.Errorf("%s: runs %v, want %v", tc.name, d.Run, tc.wantRun)
		}
		if !reflect.DeepEqual(d.Write, tc.wantWrite) {
			t.Errorf("%s: writes %+v, want %+v", tc.name, d.Write, tc.wantWrite)
		}
		if (tc.wantNote == "") != (d.Note == "") || !strings.Contains(d.Note, tc.wantNote) {
			t.Errorf("%s: note %q, want one with %q", tc.name, d.Note, tc.wantNote)
		}
	}
}

func TestUpStartFailedAndRequeue(t *testing.T) {
	v1 := Binary{Path: "/d/bin/steadyplane-aaa", Release: "v0.9.1"}
	v2 := Binary{Path: "/d/bin/steadyplane-bbb", Release: "v0.9.2"}
	me := Process{Pid: 42, Ticks: 1000}
	starting := &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: me}
	if got, want := Up(starting, v2, me), (&State{Current: v2, Previous: &v1, Phase: Done}); !reflect.DeepEqual(got, want) {
		t.Errorf("Up = %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name string
		st   *State
		self Binary
		me   Process
	}{
		{"no move", &State{Current: v1}, v1, me},
		{"another process's start", starting, v2, Process{Pid: 43, Ticks: 1000}},
		{"the same pid, another process", starting, v2, Process{Pid: 42, Ticks: 5}},
		{"not the target", starting, v1, me},
		{"no state", nil, v2, me},
	} {
		if got := Up(tc.st, tc.self, tc.me); got != nil {
			t.Errorf("Up, %s = %+v, want nil", tc.name, got)
		}
		if got := StartFailed(tc.st, tc.self, tc.me, errors.New("x")); got != nil {
			t.Errorf("StartFailed, %s = %+v, want nil", tc.name, got)
		}
	}
	got := StartFailed(starting, v2, me, errors.New("etcd not ready: timeout"))
	want := &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonStartFailed, Message: "etcd not ready: timeout"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("StartFailed = %+v, want %+v", got, want)
	}
	// Stopped while handing over (the old binary) or while the target
	// starts (the same process after exec): asked for again.
	if got, want := Requeue(starting, me), (&State{Current: v1, Target: &v2, Phase: Pending}); !reflect.DeepEqual(got, want) {
		t.Errorf("Requeue = %+v, want %+v", got, want)
	}
	if got := Requeue(starting, Process{Pid: 43}); got != nil {
		t.Errorf("Requeue by another process = %+v, want nil", got)
	}
	if got := Requeue(&State{Current: v1, Phase: Done}, me); got != nil {
		t.Errorf("Requeue with no move = %+v, want nil", got)
	}
}

func TestStateFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if st, err := ReadState(dir); st != nil || err != nil {
		t.Fatalf("ReadState of an empty directory = %v, %v", st, err)
	}
	v1 := Binary{Path: "/d/bin/a", Release: "v0.9.1"}
	want := &State{Current: v1, Target: &Binary{Path: "/d/bin/b", Release: "v0.9.2"}, Phase: Pending}
	if err := WriteState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadState(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadState = %+v, %v; want %+v", got, err, want)
	}
	if err := writeRaw(dir, "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadState(dir); err == nil || !strings.Contains(err.Error(), StateFile) {
		t.Errorf("ReadState of a torn file: %v, want an error naming it", err)
	}
}

func writeRaw(dir, s string) error {
	return os.WriteFile(filepath.Join(dir, StateFile), []byte(s), 0o600)
}
