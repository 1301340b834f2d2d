// Package history records what the robustness run's clients did and saw:
// each operation with its call and return times, its input and output
// (model), the error text, and each watcher's events; and turns the
// operations into porcupine's form.
package history

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/steadyplane/steadyplane/internal/robustness/model"
)

// Op is one operation as a client saw it.
type Op struct {
	// Client is the client that made it.
	Client int `json:"client"`
	model.Input
	Output model.Output `json:"output"`
	// Call and Return are when it was called and when its result came,
	// since the history began.
	Call   time.Duration `json:"call"`
	Return time.Duration `json:"return"`
	// Err is the error's text, for a result other than OK.
	Err string `json:"err,omitempty"`
	// Read says a list made it: one Get per object the run uses, at the
	// list's times.
	FromList bool `json:"fromList,omitempty"`
}

// Recorder collects operations from many clients at once.
type Recorder struct {
	start time.Time
	now   func() time.Time

	mu  sync.Mutex
	ops []Op
}

// NewRecorder starts a history now.
func NewRecorder() *Recorder { return NewRecorderWithClock(time.Now) }

// NewRecorderWithClock is NewRecorder with the clock injected.
func NewRecorderWithClock(now func() time.Time) *Recorder {
	return &Recorder{start: now(), now: now}
}

// Since is the time since the history began.
func (r *Recorder) Since() time.Duration { return r.now().Sub(r.start) }

// Start is when the history began.
func (r *Recorder) Start() time.Time { return r.start }

// Add records op.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Ops is a copy of the operations recorded so far, by call time.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	ops := slices.Clone(r.ops)
	r.mu.Unlock()
	slices.SortStableFunc(ops, func(a, b Op) int { return int(a.Call - b.Call) })
	return ops
}

// Porcupine is ops as porcupine checks them. A write whose outcome is
// unknown may take effect at any time after its call (a request held by a
// paused server is applied when it resumes), so it returns at the end of
// time; a failed read constrains nothing and is left out.
func Porcupine(ops []Op) []porcupine.Operation {
	out := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		ret := int64(op.Return)
		if op.Output.Result == model.Unknown {
			if op.Kind == model.Get {
				continue
			}
			ret = math.MaxInt64
		}
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: op.Input, Output: op.Output, Call: int64(op.Call), Return: ret})
	}
	return out
}
