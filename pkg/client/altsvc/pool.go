package altsvc

import (
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	wire "github.com/steadyplane/steadyplane/pkg/altsvc"
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
	// BlockedUntil is when the host may be tried again; zero if not blocked.
	BlockedUntil time.Time
	// BlockedForever is set after a certificate failure.
	BlockedForever bool
	// LastError is the failure that blocked the host.
	LastError string
}

// Pool is the shared state of every client made from one configured
// *rest.Config: the known hosts, which are blocked, and which one is in use.
// It is safe for concurrent use.
type Pool struct {
	clock         clock.PassiveClock
	blockDuration time.Duration
	local         func(host string) bool

	mu         sync.Mutex
	configured []string
	learned    []string
	expires    map[string]time.Time
	maxAge     map[string]time.Duration
	lastValue  string
	blocked    map[string]block
	current    string
}

type block struct {
	until   time.Time
	forever bool
	err     string
}

func newPool(configured []string, blockDuration time.Duration, clk clock.PassiveClock, local func(string) bool) *Pool {
	return &Pool{
		clock:         clk,
		blockDuration: blockDuration,
		local:         local,
		configured:    configured,
		expires:       map[string]time.Time{},
		maxAge:        map[string]time.Duration{},
		blocked:       map[string]block{},
	}
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
		s := HostState{Host: h, Learned: learned}
		if learned {
			s.Expires = p.expires[h]
		}
		if b, ok := p.blocked[h]; ok && (b.forever || now.Before(b.until)) {
			s.BlockedUntil, s.BlockedForever, s.LastError = b.until, b.forever, b.err
		}
		out = append(out, s)
	}
	for _, h := range p.candidatesLocked() {
		add(h, len(p.learned) > 0)
	}
	blocked := make([]string, 0, len(p.blocked))
	for h := range p.blocked {
		blocked = append(blocked, h)
	}
	sort.Strings(blocked)
	for _, h := range blocked {
		add(h, false)
	}
	return out
}

// BlockedCount returns how many hosts are blocked now.
func (p *Pool) BlockedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blockedCountLocked(p.clock.Now())
}

func (p *Pool) blockedCountLocked(now time.Time) int {
	n := 0
	for _, b := range p.blocked {
		if b.forever || now.Before(b.until) {
			n++
		}
	}
	return n
}

// plan returns the hosts to try for a request to original, best first.
func (p *Pool) plan(original string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	p.expireLocked(now)
	candidates := p.candidatesLocked()
	var lastResort []string
	for _, h := range candidates {
		if b, ok := p.blocked[h]; ok && !b.forever && now.Before(b.until) {
			lastResort = append(lastResort, h)
		}
	}
	sort.SliceStable(lastResort, func(i, j int) bool { return p.blocked[lastResort[i]].until.Before(p.blocked[lastResort[j]].until) })
	return Order(OrderInput{
		Original:   original,
		Current:    p.current,
		Candidates: candidates,
		Blocked:    func(h string) bool { return p.isBlockedLocked(h, now) },
		Local:      p.local,
		LastResort: lastResort,
	})
}

func (p *Pool) candidatesLocked() []string {
	if len(p.learned) > 0 {
		return p.learned
	}
	return p.configured
}

func (p *Pool) isBlockedLocked(h string, now time.Time) bool {
	b, ok := p.blocked[h]
	if !ok {
		return false
	}
	if b.forever || now.Before(b.until) {
		return true
	}
	delete(p.blocked, h)
	return false
}

func (p *Pool) expireLocked(now time.Time) {
	if len(p.learned) == 0 {
		return
	}
	kept := p.learned[:0]
	for _, h := range p.learned {
		if now.Before(p.expires[h]) {
			kept = append(kept, h)
		} else {
			delete(p.expires, h)
			p.lastValue = "" // the next header is read again, even if unchanged
			klog.V(2).InfoS("Alternative API server expired", "host", h)
		}
	}
	p.learned = kept
}

// succeeded records that host answered, and what its Alt-Svc header listed.
// It returns the host the pool used before, when that differs.
func (p *Pool) succeeded(host, original string, altSvc []string) (previous string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	delete(p.blocked, host)
	if p.current != host {
		previous = p.current
		if previous == "" {
			previous = original
		}
		p.current = host
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
			if ma, ok := p.maxAge[h]; ok {
				p.expires[h] = now.Add(ma)
			}
		}
		return
	}
	h, err := wire.Parse(value)
	if err != nil {
		klog.V(2).InfoS("Ignoring malformed Alt-Svc header", "from", from, "err", err)
		return
	}
	p.lastValue = value
	p.learned = p.learned[:0:0]
	p.expires = map[string]time.Time{}
	p.maxAge = map[string]time.Duration{}
	if h.Clear {
		klog.InfoS("API server cleared its alternative services", "from", from)
		return
	}
	fromHost, _, _ := net.SplitHostPort(from)
	for _, s := range h.Services {
		if s.Protocol != wire.ProtocolHTTP2 {
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
		p.expires[a] = now.Add(s.MaxAge)
		p.maxAge[a] = s.MaxAge
	}
	klog.InfoS("Learned alternative API servers", "from", from, "hosts", p.learned)
}

// failed records a failure of host and blocks it according to f. It returns
// whether the host was not blocked before.
func (p *Pool) failed(host string, f Failure, err error) bool {
	if f == NotHostFailure {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	wasBlocked := p.isBlockedLocked(host, now)
	b := block{until: now.Add(p.blockDuration), forever: f == CertificateFailure, err: err.Error()}
	if old, ok := p.blocked[host]; ok && old.forever {
		b.forever = true
	}
	p.blocked[host] = b
	if p.current == host {
		p.current = ""
	}
	return !wasBlocked
}
