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
	const pid = 42
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
			v2, &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: pid}, "moving to release v0.9.2"},
		{"a pending move whose binary is gone is dropped: this one runs", &State{Current: v1, Target: &v2, Phase: Pending}, v1, onlyV1, v1, nil, ""},
		{"the target's first start goes on", &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: pid}, v2, all, v2, nil, ""},
		{"the target's start exited; up started again by hand or a service manager", &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: 7}, v1, all,
			v1, &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonExited, Message: "up of release v0.9.2 exited before it was up"}, "release v0.9.2 failed (Exited"},
		{"the target's start exited; the target started again is not its attempt", &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: 7}, v2, all,
			v1, &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonExited, Message: "up of release v0.9.2 exited before it was up"}, "running v0.9.1"},
		{"another up runs the target's first start: this one goes on, to be refused by the lock", &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: 99}, v1, all, v1, nil, ""},
		{"after a failed move, the current binary", &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonExited}, v1, all, v1, nil, ""},
		{"an older binary started by hand runs the current one", &State{Current: v1, Phase: Done}, v0, all, v1, nil, "this data directory runs release v0.9.1"},
		{"a newer binary started by hand becomes current", &State{Current: v1, Phase: Done}, v2, all, v2, &State{Current: v2, Previous: &v1, Phase: Done}, ""},
		{"a rebuild of the same release becomes current", &State{Current: v2, Previous: &v1, Phase: Done}, v2rebuilt, all, v2rebuilt, &State{Current: v2rebuilt, Previous: &v2, Phase: Done}, ""},
		{"the current binary is gone: this one runs", &State{Current: v2, Phase: Done}, v0, onlyV1, v0, &State{Current: v0, Previous: &v2, Phase: Done}, ""},
		{"a newer binary by hand over a failed move keeps the failure on record", &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonExited}, v2rebuilt, all,
			v2rebuilt, &State{Current: v2rebuilt, Previous: &v1, Target: &v2, Phase: Failed, Reason: ReasonExited}, ""},
	}
	for _, tc := range tests {
		alive := func(p int) bool { return p == pid || p == 99 }
		d := Start(tc.st, tc.self, pid, tc.exists, alive)
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

func TestUpAndStartFailed(t *testing.T) {
	v1 := Binary{Path: "/d/bin/steadyplane-aaa", Release: "v0.9.1"}
	v2 := Binary{Path: "/d/bin/steadyplane-bbb", Release: "v0.9.2"}
	starting := &State{Current: v1, Target: &v2, Phase: Starting, StartedBy: 42}
	if got, want := Up(starting, v2, 42), (&State{Current: v2, Previous: &v1, Phase: Done}); !reflect.DeepEqual(got, want) {
		t.Errorf("Up = %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name string
		st   *State
		self Binary
		pid  int
	}{
		{"no move", &State{Current: v1}, v1, 42},
		{"another process's start", starting, v2, 43},
		{"not the target", starting, v1, 42},
		{"no state", nil, v2, 42},
	} {
		if got := Up(tc.st, tc.self, tc.pid); got != nil {
			t.Errorf("Up, %s = %+v, want nil", tc.name, got)
		}
		if got := StartFailed(tc.st, tc.self, tc.pid, errors.New("x")); got != nil {
			t.Errorf("StartFailed, %s = %+v, want nil", tc.name, got)
		}
	}
	got := StartFailed(starting, v2, 42, errors.New("etcd not ready: timeout"))
	want := &State{Current: v1, Target: &v2, Phase: Failed, Reason: ReasonStartFailed, Message: "etcd not ready: timeout"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("StartFailed = %+v, want %+v", got, want)
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
