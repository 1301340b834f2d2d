package model

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func TestStep(t *testing.T) {
	absent := State{}
	a := State{Exists: true, Value: "a", RV: 10}
	unknownRV := State{Exists: true, Value: "b", RV: 0}
	for _, tc := range []struct {
		name string
		from State
		in   Input
		out  Output
		want []State
	}{
		{"get of an absent object", absent, Input{Kind: Get}, Output{Result: NotFound}, []State{absent}},
		{"get reads the value", a, Input{Kind: Get}, Output{Result: OK, Value: "a", RV: 10}, []State{a}},
		{"get reads another value", a, Input{Kind: Get}, Output{Result: OK, Value: "x", RV: 10}, nil},
		{"get reads another resourceVersion", a, Input{Kind: Get}, Output{Result: OK, Value: "a", RV: 11}, nil},
		{"get finds nothing where an object is", a, Input{Kind: Get}, Output{Result: NotFound}, nil},
		{"get learns an unknown resourceVersion", unknownRV, Input{Kind: Get}, Output{Result: OK, Value: "b", RV: 12}, []State{{Exists: true, Value: "b", RV: 12}}},
		{"get that failed", a, Input{Kind: Get}, Output{Result: Unknown}, []State{a}},

		{"create", absent, Input{Kind: Create, Value: "a"}, Output{Result: OK, RV: 10}, []State{a}},
		{"create of an existing object", a, Input{Kind: Create, Value: "z"}, Output{Result: OK, RV: 11}, nil},
		{"create finds it exists", a, Input{Kind: Create, Value: "z"}, Output{Result: AlreadyExists}, []State{a}},
		{"create finds an absent object exists (applied twice)", absent, Input{Kind: Create, Value: "z"}, Output{Result: AlreadyExists}, nil},
		{"create that failed may have happened", absent, Input{Kind: Create, Value: "b"}, Output{Result: Unknown}, []State{absent, {Exists: true, Value: "b"}}},
		{"create that failed where one exists", a, Input{Kind: Create, Value: "b"}, Output{Result: Unknown}, []State{a}},

		{"update at the resourceVersion", a, Input{Kind: Update, Value: "b", Precondition: 10}, Output{Result: OK, RV: 11}, []State{{Exists: true, Value: "b", RV: 11}}},
		{"update at an old resourceVersion succeeds (lost update)", a, Input{Kind: Update, Value: "b", Precondition: 9}, Output{Result: OK, RV: 11}, nil},
		{"update at an old resourceVersion conflicts", a, Input{Kind: Update, Value: "b", Precondition: 9}, Output{Result: Conflict}, []State{a}},
		{"update at the resourceVersion conflicts", a, Input{Kind: Update, Value: "b", Precondition: 10}, Output{Result: Conflict}, nil},
		{"update of an absent object", absent, Input{Kind: Update, Value: "b", Precondition: 10}, Output{Result: NotFound}, []State{absent}},
		{"update where the resourceVersion is unknown", unknownRV, Input{Kind: Update, Value: "c", Precondition: 12}, Output{Result: OK, RV: 13}, []State{{Exists: true, Value: "c", RV: 13}}},
		{"conflict where the resourceVersion is unknown", unknownRV, Input{Kind: Update, Value: "c", Precondition: 12}, Output{Result: Conflict}, []State{unknownRV}},
		{"update that failed", a, Input{Kind: Update, Value: "b", Precondition: 10}, Output{Result: Unknown}, []State{a, {Exists: true, Value: "b"}}},
		{"update that failed could not apply", a, Input{Kind: Update, Value: "b", Precondition: 9}, Output{Result: Unknown}, []State{a}},

		{"delete", a, Input{Kind: Delete}, Output{Result: OK}, []State{absent}},
		{"delete at the resourceVersion", a, Input{Kind: Delete, Precondition: 10}, Output{Result: OK}, []State{absent}},
		{"delete at an old resourceVersion succeeds", a, Input{Kind: Delete, Precondition: 9}, Output{Result: OK}, nil},
		{"delete at an old resourceVersion conflicts", a, Input{Kind: Delete, Precondition: 9}, Output{Result: Conflict}, []State{a}},
		{"delete without a precondition conflicts", a, Input{Kind: Delete}, Output{Result: Conflict}, nil},
		{"delete of an absent object", absent, Input{Kind: Delete}, Output{Result: NotFound}, []State{absent}},
		{"delete succeeds on an absent object (applied twice)", absent, Input{Kind: Delete}, Output{Result: OK}, nil},
		{"delete that failed", a, Input{Kind: Delete}, Output{Result: Unknown}, []State{a, absent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Step(tc.from, tc.in, tc.out); !slices.Equal(got, tc.want) {
				t.Errorf("Step(%+v, %s) = %+v, want %+v", tc.from, Describe(tc.in, tc.out), got, tc.want)
			}
		})
	}
}

// op is one operation of a history: called at call, returned at ret
// (math.MaxInt64 for one whose outcome is unknown, which may take effect
// at any time after its call).
func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
}

func TestPorcupineHistories(t *testing.T) {
	never := int64(math.MaxInt64)
	x, y := "x", "y"
	for _, tc := range []struct {
		name    string
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{
		{"create, update, read", []porcupine.Operation{
			op(0, 0, 10, Input{Kind: Create, Name: x, Value: "1"}, Output{Result: OK, RV: 5}),
			op(1, 20, 30, Input{Kind: Update, Name: x, Value: "2", Precondition: 5}, Output{Result: OK, RV: 6}),
			op(2, 40, 50, Input{Kind: Get, Name: x}, Output{Result: OK, Value: "2", RV: 6}),
		}, porcupine.Ok},
		{"a stale read after an acknowledged update", []porcupine.Operation{
			op(0, 0, 10, Input{Kind: Create, Name: x, Value: "1"}, Output{Result: OK, RV: 5}),
			op(1, 20, 30, Input{Kind: Update, Name: x, Value: "2", Precondition: 5}, Output{Result: OK, RV: 6}),
			op(2, 40, 50, Input{Kind: Get, Name: x}, Output{Result: OK, Value: "1", RV: 5}),
		}, porcupine.Illegal},
		{"a stale read concurrent with the update", []porcupine.Operation{
			op(0, 0, 10, Input{Kind: Create, Name: x, Value: "1"}, Output{Result: OK, RV: 5}),
			op(1, 20, 50, Input{Kind: Update, Name: x, Value: "2", Precondition: 5}, Output{Result: OK, RV: 6}),
			op(2, 30, 40, Input{Kind: Get, Name: x}, Output{Result: OK, Value: "1", RV: 5}),
		}, porcupine.Ok},
		{"two updates at one resourceVersion both succeed", []porcupine.Operation{
			op(0, 0, 10, Input{Kind: Create, Name: x, Value: "1"}, Output{Result: OK, RV: 5}),
			op(1, 20, 40, Input{Kind: Update, Name: x, Value: "2", Precondition: 5}, Output{Result: OK, RV: 6}),
			op(2, 20, 40, Input{Kind: Update, Name: x, Value: "3", Precondition: 5}, Output{Result: OK, RV: 7}),
		}, porcupine.Illegal},
		{"an update whose outcome is unknown, seen later", []porcupine.Operation{
			op(0, 0, 10, Input{Kind: Create, Name: x, Value: "1"}, Output{Result: OK, RV: 5}),
			op(1, 20, never, Input{Kind: Update, Name: x, Value: "2", Precondition: 5}, Output{Result: Unknown}),
			op(2, 40, 50, Input{Kind: Get, Name: x}, Output{Result: OK, Value: "1", RV: 5}),
			op(2, 60, 70, Input{Kind: Get, Name: x}, Output{Result: OK, Value: "2", RV: 9}),
			op(2, 80, 90, Input{Kind: Update, Name: x, Value: "3", Precondition: 9}, Output{Result: OK, RV: 10}),
		}, porcupine.Ok},
		{"an unknown update seen, then unseen", []porcupine.Operation{
			op(0, 0, 10, Input{Kind: Create, Name: x, Value: "1"}, Output{Result: OK, RV: 5}),
			op(1, 20, never, Input{Kind: Update, Name: x, Value: "2", Precondition: 5}, Output{Result: Unknown}),
			op(2, 40, 50, Input{Kind: Get, Name: x}, Output{Result: OK, Value: "2", RV: 9}),
			op(2, 60, 70, Input{Kind: Get, Name: x}, Output{Result: OK, Value: "1", RV: 5}),
		}, porcupine.Illegal},
		{"a create that reports its own retry", []porcupine.Operation{
			op(0, 0, 10, Input{Kind: Create, Name: x, Value: "1"}, Output{Result: AlreadyExists}),
		}, porcupine.Illegal},
		{"objects are independent", []porcupine.Operation{
			op(0, 0, 10, Input{Kind: Create, Name: x, Value: "1"}, Output{Result: OK, RV: 5}),
			op(1, 0, 10, Input{Kind: Create, Name: y, Value: "2"}, Output{Result: OK, RV: 6}),
			op(2, 20, 30, Input{Kind: Delete, Name: x, Precondition: 5}, Output{Result: OK}),
			op(3, 40, 50, Input{Kind: Get, Name: x}, Output{Result: NotFound}),
			op(3, 40, 50, Input{Kind: Get, Name: y}, Output{Result: OK, Value: "2", RV: 6}),
		}, porcupine.Ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := porcupine.CheckOperationsTimeout(Porcupine.ToModel(), tc.history, 10*time.Second)
			if got != tc.want {
				t.Errorf("check = %s, want %s", got, tc.want)
			}
		})
	}
}
