package check

import (
	"slices"
	"time"

	"github.com/steadyplane/steadyplane/internal/robustness/history"
	"github.com/steadyplane/steadyplane/internal/robustness/model"
)

// Window is a stretch of the run: a fault's, from its start to the end of
// its effect, or the whole run's.
type Window struct {
	Kind string        `json:"kind"`
	From time.Duration `json:"from"`
	To   time.Duration `json:"to"`
}

// Gap is the longest time one client went without an answer while a
// window lasted, for its reads and for its writes.
type Gap struct {
	Client        int
	Window        Window
	Reads, Writes time.Duration
}

// Gaps is, for each window and each client, the longest stretch between
// two answers of the client (any result but Unknown: a NotFound or a
// Conflict is the server deciding) that overlaps the window, for reads
// and for writes apart. A client with no answer of a kind around the
// window counts the whole window.
func Gaps(ops []history.Op, windows []Window) []Gap {
	type answers struct{ reads, writes []time.Duration }
	byClient := map[int]*answers{}
	for _, op := range ops {
		a := byClient[op.Client]
		if a == nil {
			a = &answers{}
			byClient[op.Client] = a
		}
		if op.Output.Result == model.Unknown {
			continue
		}
		if op.Kind == model.Get {
			a.reads = append(a.reads, op.Return)
		} else {
			a.writes = append(a.writes, op.Return)
		}
	}
	clients := make([]int, 0, len(byClient))
	for c, a := range byClient {
		clients = append(clients, c)
		slices.Sort(a.reads)
		slices.Sort(a.writes)
	}
	slices.Sort(clients)
	var gaps []Gap
	for _, w := range windows {
		for _, c := range clients {
			a := byClient[c]
			gaps = append(gaps, Gap{Client: c, Window: w, Reads: longestAround(a.reads, w), Writes: longestAround(a.writes, w)})
		}
	}
	return gaps
}

// longestAround is the longest interval between consecutive times in ts
// (sorted) that overlaps w.
func longestAround(ts []time.Duration, w Window) time.Duration {
	var longest time.Duration
	prev := time.Duration(-1)
	for _, t := range ts {
		if prev >= 0 && t >= w.From && prev <= w.To {
			longest = max(longest, t-prev)
		}
		prev = t
		if t > w.To {
			return longest
		}
	}
	// No answer after the window ended: the gap runs from the last one
	// to the window's end at least.
	if prev < 0 {
		return w.To - w.From
	}
	return max(longest, w.To-prev)
}
