package altsvcclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/steadyplane/steadyplane/pkg/altsvc"
	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

// State is what the pool currently thinks of a host.
type State string

const (
	// StateUsable: nothing speaks against the host.
	StateUsable State = "Usable"
	// StateUnreachable: the host failed at the network level; it is left out
	// until the block ends, except as a last resort.
	StateUnreachable State = "Unreachable"
	// StateInitializing: the host refused a request as not ready (KEP-3028);
	// it is left out for its Retry-After.
	StateInitializing State = "Initializing"
	// StateRejected: the host's certificate did not verify; it is never used
	// again by this process.
	StateRejected State = "Rejected"
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

// hostRecord is the pool's record of one host.
type hostRecord struct {
	state   State
	until   time.Time // end of an Unreachable or Initializing block
	lastErr string
	expires time.Time     // learned hosts: forgotten after this
	maxAge  time.Duration // learned hosts: the "ma" they were listed with
}

// stateAt is the record's state at now: a block that has ended is Usable.
func (r *hostRecord) stateAt(now time.Time) State {
	if (r.state == StateUnreachable || r.state == StateInitializing) && !now.Before(r.until) {
		return StateUsable
	}
	return r.state
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
}

func newPool(configured []string, blockDuration time.Duration, clk clock.PassiveClock, local func(string) bool, seed uint64) *Pool {
	return &Pool{
		clock:         clk,
		blockDuration: blockDuration,
		local:         local,
		seed:          seed,
		configured:    configured,
		records:       map[string]*hostRecord{},
	}
}

func (p *Pool) recordLocked(h string) *hostRecord {
	r, ok := p.records[h]
	if !ok {
		r = &hostRecord{state: StateUsable}
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
// first.
func (p *Pool) plan(original string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	p.expireLocked(now)
	candidates := p.candidatesLocked()
	var lastResort []string
	for _, h := range append(candidates[:len(candidates):len(candidates)], original) {
		if r, ok := p.records[h]; ok && r.stateAt(now) == StateUnreachable && !contains(lastResort, h) {
			lastResort = append(lastResort, h)
		}
	}
	slices.SortStableFunc(lastResort, func(a, b string) int { return p.records[a].until.Compare(p.records[b].until) })
	return Order(OrderInput{
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
	if r, ok := p.records[host]; ok && r.state != StateRejected {
		r.state, r.until, r.lastErr = StateUsable, time.Time{}, ""
	}
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

// failed records a failure of host and blocks it according to f: for the
// block duration after a network failure, for wait (at most the block
// duration) after a not-ready answer, for good after a certificate failure.
// It returns whether the host was not blocked before.
func (p *Pool) failed(host string, f Failure, err error, wait time.Duration) bool {
	if f == NotHostFailure {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	r := p.recordLocked(host)
	wasBlocked := r.stateAt(now) != StateUsable
	if err != nil {
		r.lastErr = err.Error()
	}
	switch {
	case r.state == StateRejected:
		// A certificate failure is never forgotten.
	case f == CertificateFailure:
		r.state = StateRejected
	case f == NotReadyFailure:
		if wait <= 0 || wait > p.blockDuration {
			wait = p.blockDuration
		}
		r.state, r.until = StateInitializing, now.Add(wait)
	default:
		r.state, r.until = StateUnreachable, now.Add(p.blockDuration)
	}
	if p.current == host {
		p.current = ""
	}
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
}

func (p *Pool) cacheFileName() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cacheFile
}

// setCacheFile makes the pool keep its learned hosts in file, and loads
// those a previous process left there.
func (p *Pool) setCacheFile(file string) {
	p.mu.Lock()
	p.cacheFile = file
	p.mu.Unlock()
	p.loadCache()
}

// cacheRecord is the content of a cache file: the learned hosts of one
// cluster, so that a process restarted while its configured server is down
// still finds the others.
type cacheRecord struct {
	Hosts []cacheHost `json:"hosts"`
}

type cacheHost struct {
	Host    string    `json:"host"`
	Expires time.Time `json:"expires"`
}

// maxCacheFile bounds what loadCache reads: a cache file is ours, but a
// damaged or replaced one must not cost more than a short read.
const maxCacheFile = 64 << 10

// saveLocked writes the learned hosts to the cache file, if there is one.
// A failure is logged: the cache only helps, it is never needed.
func (p *Pool) saveLocked() {
	if p.cacheFile == "" {
		return
	}
	rec := cacheRecord{}
	for _, h := range p.learned {
		rec.Hosts = append(rec.Hosts, cacheHost{Host: h, Expires: p.records[h].expires})
	}
	data, err := json.Marshal(rec)
	if err == nil {
		err = atomicfile.WriteFile(p.cacheFile, data, 0o600)
	}
	if err != nil {
		klog.ErrorS(err, "Could not save the learned API servers", "file", p.cacheFile)
	}
}

// loadCache reads the learned hosts of a previous process from the cache
// file. A missing file is normal; a damaged one is reported and ignored.
func (p *Pool) loadCache() {
	if p.cacheFile == "" {
		return
	}
	hosts, err := readCache(p.cacheFile)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			klog.InfoS("Ignoring the cache of learned API servers", "file", p.cacheFile, "err", err)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	for _, h := range hosts {
		if !now.Before(h.Expires) || contains(p.learned, h.Host) {
			continue
		}
		p.learned = append(p.learned, h.Host)
		r := p.recordLocked(h.Host)
		r.expires, r.maxAge = h.Expires, h.Expires.Sub(now)
	}
	if len(p.learned) > 0 {
		klog.V(2).InfoS("Loaded learned API servers from the cache", "file", p.cacheFile, "hosts", p.learned)
	}
}

// readCache parses a cache file, refusing anything that is not a small
// regular file of well-formed entries.
func readCache(path string) ([]cacheHost, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > maxCacheFile {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", path, maxCacheFile)
	}
	var rec cacheRecord
	if err := json.NewDecoder(f).Decode(&rec); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, h := range rec.Hosts {
		if _, _, err := net.SplitHostPort(h.Host); err != nil {
			return nil, fmt.Errorf("%s: host %q: %w", path, h.Host, err)
		}
	}
	return rec.Hosts, nil
}
