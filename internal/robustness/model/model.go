// Package model is what a client history of Kubernetes objects is checked
// against: one object, by name, as the API serves it — a value and a
// resourceVersion, compare-and-swap on the resourceVersion, delete — as
// a porcupine model (github.com/anishathalye/porcupine). An operation
// whose outcome the client could not learn (a timeout, a connection
// lost, a 5xx) may have happened, at any time after it was called, or
// not at all; the model follows both.
package model

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Kind is what an operation does.
type Kind string

// The operations of the model: a quorum read, a create by name, an update
// with a resourceVersion precondition, a delete with or without one.
const (
	Get    Kind = "get"
	Create Kind = "create"
	Update Kind = "update"
	Delete Kind = "delete"
)

// Input is an operation as the client called it.
type Input struct {
	Kind Kind
	// Name is the object's.
	Name string
	// Value is what a create or an update writes; each write's is its own,
	// so that a read tells which write it saw.
	Value string
	// Precondition is the resourceVersion an update (always) or a delete
	// (when not 0) requires the object to have.
	Precondition int64
}

// Result is how an operation ended.
type Result string

// The answers the model knows. Unknown is every error that does not say
// whether the operation happened.
const (
	OK            Result = "ok"
	NotFound      Result = "not-found"
	AlreadyExists Result = "already-exists"
	Conflict      Result = "conflict"
	Unknown       Result = "unknown"
)

// Output is how the operation ended, as the client saw it.
type Output struct {
	Result Result
	// Value is what a get read.
	Value string
	// RV is the object's resourceVersion that a get read, or that a create
	// or an update made.
	RV int64
}

// State is the object: absent, or present with a value and a
// resourceVersion. RV is 0 when the object was last written by an
// operation whose outcome is unknown, until a read tells it.
type State struct {
	Exists bool
	Value  string
	RV     int64
}

// Step is the states the object may be in after the operation, from state
// s; none when the operation could not have returned out there.
func Step(s State, in Input, out Output) []State {
	if out.Result == Unknown {
		if in.Kind == Get {
			return []State{s}
		}
		if next, ok := applied(s, in, 0); ok {
			return []State{s, next}
		}
		return []State{s}
	}
	switch out.Result {
	case OK:
		if in.Kind == Get {
			if s.Exists && s.Value == out.Value && rvAgrees(s.RV, out.RV) {
				s.RV = out.RV
				return []State{s}
			}
			return nil
		}
		if next, ok := applied(s, in, out.RV); ok {
			return []State{next}
		}
	case NotFound:
		if !s.Exists && in.Kind != Create {
			return []State{s}
		}
	case AlreadyExists:
		if s.Exists && in.Kind == Create {
			return []State{s}
		}
	case Conflict:
		// An unknown resourceVersion may or may not be the precondition.
		if s.Exists && (in.Kind == Update || in.Kind == Delete && in.Precondition != 0) && (s.RV == 0 || s.RV != in.Precondition) {
			return []State{s}
		}
	}
	return nil
}

// applied is s after in succeeded and gave the object resourceVersion rv,
// and whether in could succeed from s.
func applied(s State, in Input, rv int64) (State, bool) {
	switch in.Kind {
	case Create:
		return State{Exists: true, Value: in.Value, RV: rv}, !s.Exists
	case Update:
		return State{Exists: true, Value: in.Value, RV: rv}, s.Exists && rvAgrees(s.RV, in.Precondition)
	case Delete:
		return State{}, s.Exists && (in.Precondition == 0 || rvAgrees(s.RV, in.Precondition))
	}
	return s, false
}

// rvAgrees says whether the object's resourceVersion, 0 when unknown, may
// be seen.
func rvAgrees(state, seen int64) bool { return state == 0 || state == seen }

// Porcupine is the model for porcupine.CheckOperations: operations carry
// an Input and an Output, and are checked per object name.
var Porcupine = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byName := map[string][]porcupine.Operation{}
		var names []string
		for _, op := range history {
			n := op.Input.(Input).Name
			if _, ok := byName[n]; !ok {
				names = append(names, n)
			}
			byName[n] = append(byName[n], op)
		}
		parts := make([][]porcupine.Operation, 0, len(names))
		for _, n := range names {
			parts = append(parts, byName[n])
		}
		return parts
	},
	Init: func() []any { return []any{State{}} },
	Step: func(state, input, output any) []any {
		next := Step(state.(State), input.(Input), output.(Output))
		out := make([]any, len(next))
		for i, s := range next {
			out[i] = s
		}
		return out
	},
	Equal: func(a, b any) bool { return a.(State) == b.(State) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		return Describe(in, out)
	},
	DescribeState: func(state any) string {
		s := state.(State)
		if !s.Exists {
			return "absent"
		}
		return fmt.Sprintf("%s@%d", s.Value, s.RV)
	},
}

// Describe is one line for an operation: what was asked and what came back.
func Describe(in Input, out Output) string {
	var asked string
	switch in.Kind {
	case Get:
		asked = "get " + in.Name
	case Create:
		asked = fmt.Sprintf("create %s=%s", in.Name, in.Value)
	case Update:
		asked = fmt.Sprintf("update %s=%s if rv %d", in.Name, in.Value, in.Precondition)
	case Delete:
		asked = "delete " + in.Name
		if in.Precondition != 0 {
			asked += fmt.Sprintf(" if rv %d", in.Precondition)
		}
	}
	switch {
	case out.Result == OK && in.Kind == Get:
		return fmt.Sprintf("%s -> %s@%d", asked, out.Value, out.RV)
	case out.Result == OK && in.Kind != Delete:
		return fmt.Sprintf("%s -> ok rv %d", asked, out.RV)
	}
	return fmt.Sprintf("%s -> %s", asked, out.Result)
}
