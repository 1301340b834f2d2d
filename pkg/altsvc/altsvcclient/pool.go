package altsvcclient

import (
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/steadyplane/steadyplane/pkg/altsvc"
)

// HostState is what the pool knows of one host, for status and debugging.
type HostState struct {
	// Host is host:port.
	Host string
	// Learned is true for a host listed by a server's Alt-Svc header, false
	// for one given in Options.Hosts.
	Learned bool
	// Expires is when a learned host is forgotten unless listed again.
	Expires time.Time
	// State is the host's state now.
	State State
	// BlockedUntil is when the host may be tried again; zero if not blocked.
	BlockedUntil time.Time
	// BlockedForever is set after a certificate failure.
	BlockedForever bool
	// LastError is the failure that blocked the host.
	LastError string
}

// hostRecord is the pool's record of one host: its health (the state
// machine of hoststate.go) and, for a learned host, when it is forgotten.
type hostRecord struct {
	hostHealth
	expires time.Time     // learned hosts: forgotten after this
	maxAge  time.Duration // learned hosts: the "ma" they were listed with
}

// Pool is the shared state of the clients of one cluster: the known hosts,
// their states, and which one is in use. A cluster is an origin (scheme, host
// and port a client is configured with) together with the CAs the client
// trusts, so a copy of a config pointed at another cluster gets a pool of its
// own. It is safe for concurrent use.
type Pool struct {
	clock         clock.PassiveClock
	blockDuration time.Duration
	local         func(host string) bool
	seed          uint64
	cacheFile     string

	mu         sync.Mutex
	configured []string
	learned    []string
	records    map[string]*hostRecord
	lastValue  string
	current    string
	// gen counts changes of what a plan is made from (hosts, their states,
	// the current host); cached is the last plan made.
	gen    uint64
	cached cachedPlan

	// hedges bounds the reads sent to a second host (race): an overloaded
	// cluster, where every read is slow, must not get twice the reads.
	// One hedge finds a server that answers, and the requests after it go
	// there: a partition needs few.
	hedges *rate.Limiter
}

// hedgeRate and hedgeBurst are a pool's budget of hedged reads.
const (
	hedgeRate  = 5 // per second
	hedgeBurst = 20
)

func newPool(configured []string, blockDuration time.Duration, clk clock.PassiveClock, local func(string) bool, seed uint64) *Pool {
	return &Pool{
		clock:         clk,
		blockDuration: blockDuration,
		local:         local,
		seed:          seed,
		configured:    configured,
		records:       map[string]*hostRecord{},
		hedges:        rate.NewLimiter(hedgeRate, hedgeBurst),
	}
}

func (p *Pool) recordLocked(h string) *hostRecord {
	r, ok := p.records[h]
	if !ok {
		r = &hostRecord{hostHealth: hostHealth{state: StateUsable}}
		p.records[h] = r
	}
	return r
}

// Current returns the host the last successful request used ("" before any).
func (p *Pool) Current() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.current
}

// Hosts returns every known host: the candidates (learned, else configured),
// then any other host that is blocked.
func (p *Pool) Hosts() []HostState {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	p.expireLocked(now)
	var out []HostState
	seen := map[string]bool{}
	add := func(h string, learned bool) {
		if seen[h] {
			return
		}
		seen[h] = true
		s := HostState{Host: h, Learned: learned, State: StateUsable}
		if r, ok := p.records[h]; ok {
			if learned {
				s.Expires = r.expires
			}
			s.State = r.stateAt(now)
			switch s.State {
			case StateRejected:
				s.BlockedForever, s.LastError = true, r.lastErr
			case StateUnreachable, StateInitializing:
				s.BlockedUntil, s.LastError = r.until, r.lastErr
			}
		}
		out = append(out, s)
	}
	for _, h := range p.candidatesLocked() {
		add(h, len(p.learned) > 0)
	}
	others := make([]string, 0, len(p.records))
	for h, r := range p.records {
		if r.stateAt(now) != StateUsable {
			others = append(others, h)
		}
	}
	sort.Strings(others)
	for _, h := range others {
		add(h, false)
	}
	return out
}

// BlockedCount returns how many hosts are blocked now.
func (p *Pool) BlockedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	n := 0
	for _, r := range p.records {
		if r.stateAt(now) != StateUsable {
			n++
		}
	}
	return n
}

// plan returns the hosts to try for a request to original (host:port), best
// first. The plan is kept until the pool changes or a block or a learned
// host's lifetime ends, so a request of a client whose hosts are steady
// costs one lock and no allocation; callers must not modify it.
func (p *Pool) plan(original string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	if c := &p.cached; c.hosts != nil && c.gen == p.gen && c.original == original && now.Before(c.validUntil) {
		return c.hosts
	}
	p.expireLocked(now)
	candidates := p.candidatesLocked()
	var lastResort []string
	for _, h := range append(candidates[:len(candidates):len(candidates)], original) {
		if r, ok := p.records[h]; ok && r.stateAt(now) == StateUnreachable && !contains(lastResort, h) {
			lastResort = append(lastResort, h)
		}
	}
	slices.SortStableFunc(lastResort, func(a, b string) int { return p.records[a].until.Compare(p.records[b].until) })
	hosts := Order(OrderInput{
		Original:   original,
		Current:    p.current,
		Candidates: candidates,
		Blocked: func(h string) bool {
			r, ok := p.records[h]
			return ok && r.stateAt(now) != StateUsable
		},
		Local:      p.local,
		Seed:       p.seed,
		LastResort: lastResort,
	})
	p.cached = cachedPlan{original: original, gen: p.gen, validUntil: p.nextChangeLocked(now), hosts: hosts}
	return hosts
}

// cachedPlan is the last plan, valid while the pool's generation is gen and
// until validUntil.
type cachedPlan struct {
	original   string
	gen        uint64
	validUntil time.Time
	hosts      []string
}

// farFuture stands for "no change by time alone".
var farFuture = time.Unix(1<<62, 0)

// nextChangeLocked is the first moment after now when time alone changes a
// plan: a block ends or a learned host expires.
func (p *Pool) nextChangeLocked(now time.Time) time.Time {
	next := farFuture
	for _, r := range p.records {
		if (r.state == StateUnreachable || r.state == StateInitializing) && r.until.After(now) && r.until.Before(next) {
			next = r.until
		}
	}
	for _, h := range p.learned {
		if r := p.records[h]; r != nil && r.expires.After(now) && r.expires.Before(next) {
			next = r.expires
		}
	}
	return next
}

func (p *Pool) candidatesLocked() []string {
	if len(p.learned) > 0 {
		return p.learned
	}
	return p.configured
}

func (p *Pool) expireLocked(now time.Time) {
	if len(p.learned) == 0 {
		return
	}
	kept := p.learned[:0]
	for _, h := range p.learned {
		if r := p.records[h]; r != nil && now.Before(r.expires) {
			kept = append(kept, h)
			continue
		}
		p.lastValue = "" // the next header is read again, even if unchanged
		p.gen++
		klog.V(2).InfoS("Alternative API server expired", "host", h)
	}
	p.learned = kept
}

// succeeded records that host answered. altSvc is the response's Alt-Svc
// header, nil when it may not be believed (see MayLearnFrom). It returns the
// host the pool used before, when that differs.
func (p *Pool) succeeded(host, original string, altSvc []string) (previous string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	if r, ok := p.records[host]; ok {
		if next := transition(r.hostHealth, hostEvent{kind: hostAnswered}, now, p.blockDuration); next != r.hostHealth {
			r.hostHealth = next
			p.gen++
		}
	}
	if p.current != host {
		previous = p.current
		if previous == "" {
			previous = original
		}
		p.current = host
		p.gen++
	}
	if len(altSvc) > 0 {
		p.learnLocked(host, altSvc, now)
	}
	if previous == host {
		previous = ""
	}
	return previous
}

// learnLocked replaces the learned hosts with those an Alt-Svc header lists.
// Parsing happens only when the header changes; otherwise the expiry of each
// listed host is refreshed, since the server has just listed it again.
func (p *Pool) learnLocked(from string, values []string, now time.Time) {
	value := values[0]
	if len(values) > 1 {
		value = strings.Join(values, ", ")
	}
	if value == p.lastValue {
		for _, h := range p.learned {
			if r := p.records[h]; r != nil {
				r.expires = now.Add(r.maxAge)
			}
		}
		return
	}
	h, err := altsvc.Parse(value)
	if err != nil {
		klog.V(2).InfoS("Ignoring malformed Alt-Svc header", "from", from, "err", err)
		return
	}
	p.lastValue = value
	p.learned = p.learned[:0:0]
	p.gen++
	if h.Clear {
		klog.InfoS("API server cleared its alternative services", "from", from)
		p.saveLocked()
		return
	}
	fromHost, _, _ := net.SplitHostPort(from)
	for _, s := range h.Services {
		if s.Protocol != altsvc.ProtocolHTTP2 {
			continue
		}
		if s.Host == "" {
			s.Host = fromHost
		}
		a := net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
		if contains(p.learned, a) {
			continue
		}
		p.learned = append(p.learned, a)
		r := p.recordLocked(a)
		r.expires, r.maxAge = now.Add(s.MaxAge), s.MaxAge
	}
	klog.InfoS("Learned alternative API servers", "from", from, "hosts", p.learned)
	p.saveLocked()
}

// failed records a failure of host and moves it through the host state
// machine (transition): blocked for the block duration after a network
// failure, for wait (at most the block duration) after a not-ready answer,
// for good after a certificate failure. It returns whether the host was not
// blocked before.
func (p *Pool) failed(host string, f Failure, err error, wait time.Duration) bool {
	ev, ok := eventFor(f, err, wait)
	if !ok {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	r := p.recordLocked(host)
	wasBlocked := r.stateAt(now) != StateUsable
	r.hostHealth = transition(r.hostHealth, ev, now, p.blockDuration)
	if p.current == host {
		p.current = ""
	}
	p.gen++
	return !wasBlocked
}

// configure sets the alternatives known in advance, if there are any.
func (p *Pool) configure(hosts []string) {
	if len(hosts) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.configured = hosts
	p.gen++
}
