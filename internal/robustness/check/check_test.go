package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/steadyplane/steadyplane/internal/robustness/history"
	"github.com/steadyplane/steadyplane/internal/robustness/model"
)

func w(kind model.Kind, name, value string, pre int64, rv int64, call, ret time.Duration) history.Op {
	return history.Op{Input: model.Input{Kind: kind, Name: name, Value: value, Precondition: pre},
		Output: model.Output{Result: model.OK, RV: rv}, Call: call, Return: ret}
}

func TestWriteOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []history.Op
		want []string
	}{
		{"in order", []history.Op{w(model.Create, "a", "1", 0, 5, 0, 10), w(model.Create, "b", "2", 0, 6, 20, 30)}, nil},
		{"concurrent, either order", []history.Op{w(model.Create, "a", "1", 0, 6, 0, 30), w(model.Create, "b", "2", 0, 5, 10, 20)}, nil},
		{"two at one rv", []history.Op{w(model.Create, "a", "1", 0, 5, 0, 10), w(model.Create, "b", "2", 0, 5, 0, 10)}, []string{"two writes acknowledged at rv 5"}},
		{"a later write below an earlier", []history.Op{w(model.Create, "a", "1", 0, 9, 0, 10), w(model.Update, "b", "2", 3, 7, 20, 30)}, []string{"has an rv below"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WriteOrder(tc.ops)
			if len(got) != len(tc.want) {
				t.Fatalf("WriteOrder = %q, want %d violations", got, len(tc.want))
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("violation %q, want %q", got[i], tc.want[i])
				}
			}
		})
	}
}

func TestHistoryReport(t *testing.T) {
	ops := []history.Op{
		w(model.Create, "a", "1", 0, 5, 0, 10),
		w(model.Update, "a", "2", 5, 6, 20, 30),
		{Input: model.Input{Kind: model.Get, Name: "a"}, Output: model.Output{Result: model.OK, Value: "1", RV: 5}, Call: 40, Return: 50},
	}
	r := History(ops, nil, 10*time.Second)
	if r.OK() || r.Linearizable != porcupine.Illegal || len(r.Violations) != 1 {
		t.Fatalf("a stale read: %+v, want one violation, not linearizable", r)
	}
	dir := t.TempDir()
	if err := r.WriteReport(dir, ops, nil, map[string]int{"seed": 7}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"history.json", "watches.json", "run.json", "violations.txt", "linearization.html"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if good := History(ops[:2], nil, 10*time.Second); !good.OK() {
		t.Errorf("create and update: %+v, want no violation", good)
	}
}

func TestGaps(t *testing.T) {
	op := func(client int, kind model.Kind, call, ret time.Duration, result model.Result) history.Op {
		return history.Op{Client: client, Input: model.Input{Kind: kind}, Output: model.Output{Result: result}, Call: call, Return: ret}
	}
	ms := time.Millisecond
	s := time.Second
	ops := []history.Op{
		// client 1 reads every 50 ms until a read at 2 s fails after 1 s;
		// the next read, at 3 s, is answered at 3.05 s.
		op(1, model.Get, 1900*ms, 1950*ms, model.OK), op(1, model.Get, 1950*ms, 2*s, model.NotFound),
		op(1, model.Get, 2*s, 3*s, model.Unknown), // a failure is no answer
		op(1, model.Get, 3*s, 3050*ms, model.OK),
		// its writes: one slow answer, then a long pause of writing only
		// reads (no gap), then one that failed with nothing after it.
		op(1, model.Update, 1*s, 1600*ms, model.Conflict), op(1, model.Update, 9*s, 9100*ms, model.Unknown),
		// client 2 reads once, long before, and never writes.
		op(2, model.Get, 100*ms, 150*ms, model.OK),
		// client 3 lists at 5 s: one item it could not read among those
		// it did (one call), then reads again at 9 s.
		op(3, model.Get, 5*s, 5050*ms, model.Unknown), op(3, model.Get, 5*s, 5050*ms, model.OK),
		op(3, model.Get, 9*s, 9050*ms, model.OK), op(3, model.Update, 1*s, 1050*ms, model.OK),
	}
	pause := Window{Kind: "pause", From: 2500 * ms, To: 4 * s}
	late := Window{Kind: "late", From: 8 * s, To: 10 * s}
	list := Window{Kind: "list", From: 4900 * ms, To: 5200 * ms}
	got := Gaps(ops, []Window{pause, late, list})
	want := []Gap{
		{Client: 1, Window: pause, Reads: 1050 * ms, Writes: 0},
		{Client: 2, Window: pause, Reads: 0, Writes: 1500 * ms},
		{Client: 3, Window: pause, Reads: 0, Writes: 0},
		{Client: 1, Window: late, Reads: 0, Writes: 1 * s}, // open from 9 s to the window's end
		{Client: 2, Window: late, Reads: 0, Writes: 2 * s},
		{Client: 3, Window: late, Reads: 50 * ms, Writes: 0},
		{Client: 1, Window: list, Reads: 0, Writes: 0},
		{Client: 2, Window: list, Reads: 0, Writes: 300 * ms},
		{Client: 3, Window: list, Reads: 50 * ms, Writes: 0}, // the list was answered
	}
	if len(got) != len(want) {
		t.Fatalf("Gaps = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("gap %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
