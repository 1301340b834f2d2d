package check

import (
	"cmp"
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

// Gap is the longest time one client waited for an answer while a window
// lasted, for its reads and for its writes.
type Gap struct {
	Client        int
	Window        Window
	Reads, Writes time.Duration
}

// Gaps is, for each window and each client, the longest time the client
// waited for an answer (any result but Unknown: a NotFound or a Conflict
// is the server deciding), for reads and for writes apart: from the call
// of an operation to the return of the first answered operation of its
// kind called since, itself or a later one, over the waits that overlap
// the window. Time the client spent on the other kind counts only inside
// a wait (after a failure, until the next answer of its kind): a run of
// writes after an answered read is no gap in reads. A client with no wait
// of a kind around the window waited 0 for it; one that never made an
// operation of that kind counts the whole window.
func Gaps(ops []history.Op, windows []Window) []Gap {
	type calls struct{ reads, writes []history.Op }
	byClient := map[int]*calls{}
	for _, op := range ops {
		c := byClient[op.Client]
		if c == nil {
			c = &calls{}
			byClient[op.Client] = c
		}
		if op.Kind == model.Get {
			c.reads = append(c.reads, op)
		} else {
			c.writes = append(c.writes, op)
		}
	}
	clients := make([]int, 0, len(byClient))
	waits := map[int][2][]wait{}
	for client, c := range byClient {
		clients = append(clients, client)
		waits[client] = [2][]wait{waitsOf(c.reads), waitsOf(c.writes)}
	}
	slices.Sort(clients)
	var gaps []Gap
	for _, w := range windows {
		for _, c := range clients {
			gaps = append(gaps, Gap{Client: c, Window: w, Reads: longestIn(waits[c][0], w), Writes: longestIn(waits[c][1], w)})
		}
	}
	return gaps
}

// wait is how long a client waited from one call for an answer; open when
// no answer came after it.
type wait struct {
	from, until time.Duration
	open        bool
}

// waitsOf turns one client's operations of one kind into its waits: each
// call waits until the return of the first answered operation called at
// or after it (a client makes one operation at a time, so that one
// returns first).
func waitsOf(ops []history.Op) []wait {
	// A list is recorded as many operations with one call: the unanswered
	// ones first, so that the list's answer ends their wait too.
	slices.SortStableFunc(ops, func(a, b history.Op) int {
		if c := cmp.Compare(a.Call, b.Call); c != 0 {
			return c
		}
		return cmp.Compare(b2i(a.Output.Result != model.Unknown), b2i(b.Output.Result != model.Unknown))
	})
	out := make([]wait, len(ops))
	next, answered := time.Duration(0), false
	for i := len(ops) - 1; i >= 0; i-- {
		if ops[i].Output.Result != model.Unknown {
			next, answered = ops[i].Return, true
		}
		out[i] = wait{from: ops[i].Call, until: next, open: !answered}
	}
	return out
}

// longestIn is the longest of waits that overlaps w; an open wait runs to
// w's end at least.
func longestIn(waits []wait, w Window) time.Duration {
	if len(waits) == 0 {
		return w.To - w.From
	}
	var longest time.Duration
	for _, x := range waits {
		until := x.until
		if x.open {
			until = max(w.To, x.from)
		}
		if x.from <= w.To && until >= w.From {
			longest = max(longest, until-x.from)
		}
	}
	return longest
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
