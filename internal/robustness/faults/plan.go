// Package faults plans the robustness run's faults: a schedule drawn from
// a seed, so that a run can be replayed, with faults that overlap but
// never take two servers down at once.
package faults

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"time"
)

// Kind is what a fault does to a host.
type Kind string

// The faults. A kill is SIGKILL (the node agent restarts a static pod; a
// killed host's up is started again, as a service manager would); a
// pause is SIGSTOP, then SIGCONT; a black hole drops every packet to and
// from the host; a lossy link drops a share of them.
const (
	KillAPIServer  Kind = "kill-apiserver"
	KillEtcd       Kind = "kill-etcd"
	KillHost       Kind = "kill-host"
	PauseAPIServer Kind = "pause-apiserver"
	PauseEtcd      Kind = "pause-etcd"
	BlackHole      Kind = "blackhole"
	Lossy          Kind = "lossy"
)

// Kinds are every fault a plan may draw.
var Kinds = []Kind{KillAPIServer, KillEtcd, KillHost, PauseAPIServer, PauseEtcd, BlackHole, Lossy}

// ParseKinds reads a comma-separated list of kinds (as a flag gives
// them); an empty list is every kind.
func ParseKinds(list string) ([]Kind, error) {
	var out []Kind
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(Kinds, Kind(name)) {
			return nil, fmt.Errorf("unknown fault kind %q (known: %v)", name, Kinds)
		}
		if !slices.Contains(out, Kind(name)) {
			out = append(out, Kind(name))
		}
	}
	return out, nil
}

// Fault is one fault of a plan.
type Fault struct {
	Kind Kind `json:"kind"`
	// Host is the server's index.
	Host int `json:"host"`
	// At is when it starts, since the run began; For how long it lasts
	// (a pause, a black hole, a lossy link) or, for a kill, how long the
	// plan keeps for the process to come back.
	At  time.Duration `json:"at"`
	For time.Duration `json:"for"`
	// LossPercent is a lossy link's share of packets dropped.
	LossPercent int `json:"lossPercent,omitempty"`
}

// End is when the fault's effect is over, as planned.
func (f Fault) End() time.Duration { return f.At + f.For }

// Down says the fault takes its server out (its API server or its etcd
// member): a lossy link only slows it.
func (f Fault) Down() bool { return f.Kind != Lossy }

// span is the range a kind's duration is drawn from.
type span struct{ min, max time.Duration }

var durations = map[Kind]span{
	KillAPIServer:  {20 * time.Second, 20 * time.Second},
	KillEtcd:       {20 * time.Second, 20 * time.Second},
	KillHost:       {60 * time.Second, 60 * time.Second},
	PauseAPIServer: {time.Second, 20 * time.Second},
	PauseEtcd:      {time.Second, 20 * time.Second},
	BlackHole:      {2 * time.Second, 15 * time.Second},
	Lossy:          {5 * time.Second, 20 * time.Second},
}

// Options shape a plan.
type Options struct {
	// Length is the run's; every fault ends within it.
	Length time.Duration
	// Servers is how many servers there are (at least 3 for faults that
	// take one down).
	Servers int
	// Kinds are those drawn from (all when empty).
	Kinds []Kind
	// Gap is the range of the wait from one fault's start to the next's.
	MinGap, MaxGap time.Duration
}

// Plan draws a schedule from seed: faults of o.Kinds one after another at
// gaps of MinGap to MaxGap, each on a random server, lasting as its kind
// does. Faults overlap, but never take two servers down: while one is
// down, only a black hole of that same server may join (a fault of
// another kind is not drawn then). A lossy link is not "down", and
// overlaps anything: on one of the two servers left it strains etcd's
// quorum, which the run measures. The same seed and options give the
// same plan.
func Plan(seed int64, o Options) []Fault {
	kinds := o.Kinds
	if len(kinds) == 0 {
		kinds = Kinds
	}
	if o.Servers < 1 || o.MaxGap <= 0 || o.MinGap > o.MaxGap {
		return nil
	}
	rnd := rand.New(rand.NewSource(seed))
	draw := func(s span) time.Duration {
		if s.max <= s.min {
			return s.min
		}
		return s.min + time.Duration(rnd.Int63n(int64(s.max-s.min)))
	}
	var plan []Fault
	at := draw(span{o.MinGap, o.MaxGap})
	for {
		kind := kinds[rnd.Intn(len(kinds))]
		f := Fault{Kind: kind, Host: rnd.Intn(o.Servers), At: at, For: draw(durations[kind])}
		if kind == Lossy {
			f.LossPercent = 10 + rnd.Intn(41)
		}
		if f.End() > o.Length {
			break
		}
		if f.Down() {
			if down := downAt(plan, at); down != nil {
				// Only a black hole joins a server already down: a
				// second kill or pause of its processes would find
				// them gone or stopped, and a killed host's up comes
				// back at its own pace.
				if f.Kind != BlackHole {
					at += draw(span{o.MinGap, o.MaxGap})
					continue
				}
				f.Host = down.Host
			}
		}
		plan = append(plan, f)
		at += draw(span{o.MinGap, o.MaxGap})
	}
	return plan
}

// downAt is the fault of plan that has a server down at t (a host kill
// first), or nil.
func downAt(plan []Fault, t time.Duration) *Fault {
	var down *Fault
	for i, f := range plan {
		if f.Down() && f.At <= t && t < f.End() && (down == nil || f.Kind == KillHost) {
			down = &plan[i]
		}
	}
	return down
}
