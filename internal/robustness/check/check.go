// Package check holds a robustness run's history to what the API
// promises: linearizable operations per object (porcupine, with the
// model of an object), the watch guarantees, resourceVersions that order
// acknowledged writes as they happened; and measures availability. A
// failed check writes a report that shows the history.
package check

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/steadyplane/steadyplane/internal/robustness/history"
	"github.com/steadyplane/steadyplane/internal/robustness/model"
)

// Result is what the checks found.
type Result struct {
	// Operations counts the operations checked, Unknown those whose
	// outcome the client could not learn.
	Operations, Unknown int
	// Linearizable is porcupine's verdict (Unknown when it timed out).
	Linearizable porcupine.CheckResult
	// Violations are every broken promise, each a sentence; the
	// history's linearizability is one when it is Illegal.
	Violations []string

	info porcupine.LinearizationInfo
}

// OK says no check found a violation and the linearizability check ended.
func (r Result) OK() bool { return len(r.Violations) == 0 && r.Linearizable == porcupine.Ok }

// History runs every check on ops and watches; linearizability may take
// up to timeout.
func History(ops []history.Op, watches []history.Watch, timeout time.Duration) Result {
	r := Result{Operations: len(ops)}
	for _, op := range ops {
		if op.Output.Result == model.Unknown {
			r.Unknown++
		}
	}
	r.Linearizable, r.info = porcupine.CheckOperationsVerbose(model.Porcupine.ToModel(), history.Porcupine(ops), timeout)
	if r.Linearizable == porcupine.Illegal {
		r.Violations = append(r.Violations, "the operations are not linearizable (linearization.html shows the longest linearizable prefix of each object's)")
	}
	r.Violations = append(r.Violations, WriteOrder(ops)...)
	r.Violations = append(r.Violations, history.CheckWatches(watches, ops)...)
	return r
}

// WriteOrder checks the resourceVersions of acknowledged writes: no two
// share one, and a write that began after another was acknowledged has a
// greater one (resourceVersions order writes as they happened).
func WriteOrder(ops []history.Op) []string {
	var writes []history.Op
	for _, op := range ops {
		if op.Output.Result == model.OK && (op.Kind == model.Create || op.Kind == model.Update) {
			writes = append(writes, op)
		}
	}
	var bad []string
	byRV := map[int64]history.Op{}
	for _, w := range writes {
		if other, ok := byRV[w.Output.RV]; ok {
			bad = append(bad, fmt.Sprintf("two writes acknowledged at rv %d: %s and %s", w.Output.RV,
				model.Describe(other.Input, other.Output), model.Describe(w.Input, w.Output)))
		}
		byRV[w.Output.RV] = w
	}
	// Sweep by call time, keeping the greatest rv of the writes that
	// returned before.
	returned := slices.Clone(writes)
	slices.SortFunc(returned, func(a, b history.Op) int { return int(a.Return - b.Return) })
	slices.SortFunc(writes, func(a, b history.Op) int { return int(a.Call - b.Call) })
	var maxBefore history.Op
	i := 0
	for _, w := range writes {
		for ; i < len(returned) && returned[i].Return < w.Call; i++ {
			if returned[i].Output.RV > maxBefore.Output.RV {
				maxBefore = returned[i]
			}
		}
		if maxBefore.Output.RV != 0 && w.Output.RV <= maxBefore.Output.RV {
			bad = append(bad, fmt.Sprintf("%s (called at %s) has an rv below %s's, acknowledged before it (at %s)",
				model.Describe(w.Input, w.Output), w.Call, model.Describe(maxBefore.Input, maxBefore.Output), maxBefore.Return))
		}
	}
	return bad
}

// WriteReport writes the history (history.json, watches.json), the
// violations (violations.txt) and porcupine's visualization of the
// operations (linearization.html) into dir, with extra (the run's seed,
// its faults) as run.json.
func (r Result) WriteReport(dir string, ops []history.Op, watches []history.Watch, extra any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, v := range map[string]any{"history.json": ops, "watches.json": watches, "run.json": extra} {
		b, err := json.MarshalIndent(v, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	text := fmt.Sprintf("operations %d (outcome unknown %d), linearizable: %s\n", r.Operations, r.Unknown, r.Linearizable)
	for _, v := range r.Violations {
		text += v + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "violations.txt"), []byte(text), 0o644); err != nil {
		return err
	}
	if r.Linearizable == porcupine.Ok || r.Linearizable == porcupine.Illegal {
		return porcupine.VisualizePath(model.Porcupine.ToModel(), r.info, filepath.Join(dir, "linearization.html"))
	}
	return nil
}
