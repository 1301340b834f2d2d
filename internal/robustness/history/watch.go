package history

import (
	"fmt"
	"slices"
	"time"

	"github.com/steadyplane/steadyplane/internal/robustness/model"
)

// EventType is a watch event's type.
type EventType string

// The watch events of objects.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
)

// Event is one watch event as a watcher received it.
type Event struct {
	Type  EventType `json:"type"`
	Name  string    `json:"name"`
	Value string    `json:"value"`
	// RV is the object's resourceVersion in the event: for a delete, the
	// deletion's.
	RV int64 `json:"rv"`
	// At is when it arrived, since the history began.
	At time.Duration `json:"at"`
}

// Gap is a stretch of resourceVersions a watcher may have missed: its
// watch ended with 410 Gone (the resourceVersion was compacted or too old
// for the server) and it listed again; events after From up to To may be
// missing.
type Gap struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// Watch is one watcher's stream from its first resourceVersion on.
type Watch struct {
	Watcher int `json:"watcher"`
	// From is the resourceVersion it started from (a list's): events
	// after it are expected.
	From   int64   `json:"from"`
	Events []Event `json:"events"`
	// Resumed counts watches it started again from its last
	// resourceVersion (a connection lost, a server gone); Gaps are those
	// it could not resume.
	Resumed int   `json:"resumed"`
	Gaps    []Gap `json:"gaps,omitempty"`
}

// Last is the resourceVersion of the last event, or From.
func (w Watch) Last() int64 {
	if len(w.Events) == 0 {
		return w.From
	}
	return w.Events[len(w.Events)-1].RV
}

func (w Watch) inGap(rv int64) bool {
	return slices.ContainsFunc(w.Gaps, func(g Gap) bool { return rv > g.From && rv <= g.To })
}

// CheckWatches holds the watchers' streams to the watch guarantees,
// against ops (every client's): each stream in resourceVersion order with
// none twice; no event without a write that may have made it; every
// create and update acknowledged with a resourceVersion in the stream's
// range delivered (outside a gap after 410 Gone); an acknowledged delete
// of a version in range delivered before the object's next ADDED; and every
// two watchers agree on the event at each resourceVersion. It returns
// the violations, each a sentence.
func CheckWatches(watches []Watch, ops []Op) []string {
	var bad []string
	// writes by value (each write's is its own); deletes by name.
	byValue := map[string]Op{}
	deletes := map[string][]Op{}
	for _, op := range ops {
		switch {
		case op.Kind == model.Create || op.Kind == model.Update:
			if op.Output.Result == model.OK || op.Output.Result == model.Unknown {
				byValue[op.Value] = op
			}
		case op.Kind == model.Delete:
			if op.Output.Result == model.OK || op.Output.Result == model.Unknown {
				deletes[op.Name] = append(deletes[op.Name], op)
			}
		}
	}
	atRV := map[int64]Event{}
	for _, w := range watches {
		prev := w.From
		seen := map[int64]Event{}
		for _, e := range w.Events {
			if e.RV <= prev {
				bad = append(bad, fmt.Sprintf("watcher %d: event %s %s at rv %d after rv %d (out of order or twice)", w.Watcher, e.Type, e.Name, e.RV, prev))
			}
			prev = max(prev, e.RV)
			seen[e.RV] = e
			if other, ok := atRV[e.RV]; ok && (other.Type != e.Type || other.Name != e.Name || other.Value != e.Value) {
				bad = append(bad, fmt.Sprintf("watcher %d: rv %d is %s %s=%s, another watcher saw %s %s=%s", w.Watcher, e.RV, e.Type, e.Name, e.Value, other.Type, other.Name, other.Value))
			}
			atRV[e.RV] = e
			switch e.Type {
			case Added, Modified:
				op, ok := byValue[e.Value]
				switch {
				case !ok:
					bad = append(bad, fmt.Sprintf("watcher %d: %s %s=%s at rv %d, which no write made", w.Watcher, e.Type, e.Name, e.Value, e.RV))
				case op.Name != e.Name:
					bad = append(bad, fmt.Sprintf("watcher %d: %s %s=%s at rv %d, a value written to %s", w.Watcher, e.Type, e.Name, e.Value, e.RV, op.Name))
				case op.Output.Result == model.OK && op.Output.RV != e.RV:
					bad = append(bad, fmt.Sprintf("watcher %d: %s %s=%s at rv %d, acknowledged at rv %d", w.Watcher, e.Type, e.Name, e.Value, e.RV, op.Output.RV))
				}
			case Deleted:
				if len(deletes[e.Name]) == 0 {
					bad = append(bad, fmt.Sprintf("watcher %d: DELETED %s at rv %d, which no delete made", w.Watcher, e.Name, e.RV))
				}
			}
		}
		last := w.Last()
		for _, op := range byValue {
			rv := op.Output.RV
			if op.Output.Result != model.OK || rv <= w.From || rv > last || w.inGap(rv) {
				continue
			}
			if e, ok := seen[rv]; !ok || e.Value != op.Value {
				bad = append(bad, fmt.Sprintf("watcher %d: missed %s %s=%s at rv %d (it watched rv %d to %d)", w.Watcher, op.Kind, op.Name, op.Value, rv, w.From, last))
			}
		}
		for name, ds := range deletes {
			for _, d := range ds {
				// The deletion's own resourceVersion is not known: it is
				// due in the stream once the object came back after it.
				if d.Output.Result != model.OK || d.Precondition <= w.From {
					continue
				}
				i := slices.IndexFunc(w.Events, func(e Event) bool { return e.Type == Added && e.Name == name && e.RV > d.Precondition })
				if i < 0 {
					continue
				}
				back := w.Events[i].RV
				// The deletion lies between the precondition and the
				// object's return: a gap there may hold it.
				if slices.ContainsFunc(w.Gaps, func(g Gap) bool { return g.From < back && g.To > d.Precondition }) {
					continue
				}
				if !slices.ContainsFunc(w.Events, func(e Event) bool { return e.Type == Deleted && e.Name == name && e.RV > d.Precondition && e.RV < back }) {
					bad = append(bad, fmt.Sprintf("watcher %d: missed the delete of %s at rv %d (it watched rv %d to %d)", w.Watcher, name, d.Precondition, w.From, last))
				}
			}
		}
	}
	slices.Sort(bad)
	return bad
}
