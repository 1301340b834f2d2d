package history

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/steadyplane/steadyplane/internal/robustness/model"
)

func write(kind model.Kind, name, value string, pre int64, result model.Result, rv int64) Op {
	return Op{Input: model.Input{Kind: kind, Name: name, Value: value, Precondition: pre}, Output: model.Output{Result: result, RV: rv}}
}

func TestPorcupine(t *testing.T) {
	ops := []Op{
		write(model.Create, "a", "1", 0, model.OK, 5),
		{Input: model.Input{Kind: model.Get, Name: "a"}, Output: model.Output{Result: model.Unknown}, Call: 1, Return: 2},
		{Input: model.Input{Kind: model.Update, Name: "a", Value: "2", Precondition: 5}, Output: model.Output{Result: model.Unknown}, Call: 3, Return: 4},
	}
	got := Porcupine(ops)
	if len(got) != 2 {
		t.Fatalf("%d operations, want 2 (a failed read says nothing)", len(got))
	}
	if got[1].Return != math.MaxInt64 || got[1].Call != 3 {
		t.Errorf("the update whose outcome is unknown: call %d return %d, want 3 and the end of time", got[1].Call, got[1].Return)
	}
}

func TestRecorderOrdersByCall(t *testing.T) {
	now := time.Unix(100, 0)
	r := NewRecorderWithClock(func() time.Time { return now })
	now = now.Add(time.Second)
	if r.Since() != time.Second {
		t.Errorf("Since = %s", r.Since())
	}
	r.Add(Op{Client: 1, Call: 20})
	r.Add(Op{Client: 2, Call: 10})
	if ops := r.Ops(); ops[0].Client != 2 || ops[1].Client != 1 {
		t.Errorf("ops %+v, want by call time", ops)
	}
}

func TestCheckWatches(t *testing.T) {
	ops := []Op{
		write(model.Create, "a", "a1", 0, model.OK, 10),
		write(model.Update, "a", "a2", 10, model.OK, 11),
		write(model.Create, "b", "b1", 0, model.Unknown, 0),
		write(model.Delete, "a", "", 11, model.OK, 0),
		write(model.Create, "a", "a3", 0, model.OK, 14),
	}
	good := []Event{
		{Type: Added, Name: "a", Value: "a1", RV: 10},
		{Type: Modified, Name: "a", Value: "a2", RV: 11},
		{Type: Added, Name: "b", Value: "b1", RV: 12},
		{Type: Deleted, Name: "a", Value: "a2", RV: 13},
		{Type: Added, Name: "a", Value: "a3", RV: 14},
	}
	drop := func(i int) []Event { return append(append([]Event{}, good[:i]...), good[i+1:]...) }
	for _, tc := range []struct {
		name    string
		watches []Watch
		want    []string // words each violation has, in order
	}{
		{"every event once in order", []Watch{{From: 5, Events: good}, {Watcher: 1, From: 10, Events: good[1:]}}, nil},
		{"a write whose outcome was unknown shows", []Watch{{From: 11, Events: good[2:]}}, nil},
		{"an acknowledged update missing", []Watch{{From: 5, Events: drop(1)}}, []string{"missed update a=a2 at rv 11"}},
		{"missing inside a gap after 410", []Watch{{From: 5, Events: drop(1), Gaps: []Gap{{From: 10, To: 12}}}}, nil},
		{"a delete missing before the object came back", []Watch{{From: 5, Events: drop(3)}}, []string{"missed the delete of a"}},
		{"a delete inside a gap after 410", []Watch{{From: 5, Events: drop(3), Gaps: []Gap{{From: 12, To: 13}}}}, nil},
		{"a delete delivered after the object came back", []Watch{{From: 5, Events: []Event{good[0], good[1], good[2], good[4], {Type: Deleted, Name: "a", Value: "a2", RV: 15}}}}, []string{"missed the delete of a"}},
		{"an event twice", []Watch{{From: 5, Events: append(good[:2:2], good[1:]...)}}, []string{"out of order or twice"}},
		{"out of order", []Watch{{From: 5, Events: []Event{good[1], good[0]}}}, []string{"out of order or twice"}},
		{"an event no write made", []Watch{{From: 14, Events: []Event{{Type: Added, Name: "c", Value: "c9", RV: 20}}}}, []string{"which no write made"}},
		{"an event at another resourceVersion than acknowledged", []Watch{{From: 5, Events: []Event{{Type: Added, Name: "a", Value: "a1", RV: 9}}}}, []string{"acknowledged at rv 10"}},
		{"watchers disagree", []Watch{{From: 5, Events: good[:1]}, {Watcher: 1, From: 5, Events: []Event{{Type: Added, Name: "a", Value: "a2", RV: 10}}}}, []string{"acknowledged at rv 11", "missed create a=a1", "another watcher saw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckWatches(tc.watches, ops)
			if len(got) != len(tc.want) {
				t.Fatalf("violations %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %q, want one with %q", got[i], w)
				}
			}
		})
	}
}
