package altsvcclient

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestPool(t *testing.T) {
	const orig, a, b = "10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"
	netErr := errors.New("connection refused")
	newTestPool := func(configured ...string) (*Pool, *clocktesting.FakePassiveClock) {
		clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
		return newPool(configured, 10*time.Second, clk, func(string) bool { return false }, 0), clk
	}
	plan := func(t *testing.T, p *Pool, want ...string) {
		t.Helper()
		if got := p.plan(orig); !reflect.DeepEqual(got, want) {
			t.Fatalf("plan = %v, want %v", got, want)
		}
	}
	state := func(p *Pool, h string) State {
		for _, s := range p.Hosts() {
			if s.Host == h {
				return s.State
			}
		}
		return ""
	}

	t.Run("network block expires", func(t *testing.T) {
		p, clk := newTestPool(a, b)
		plan(t, p, orig, a, b)
		if !p.failed(a, NetworkFailure, netErr, 0) {
			t.Fatal("first failure should report a new block")
		}
		if p.failed(a, NetworkFailure, netErr, 0) {
			t.Fatal("second failure of a blocked host reported as new")
		}
		if s := state(p, a); s != StateUnreachable {
			t.Errorf("state of a = %s", s)
		}
		plan(t, p, orig, b, a)
		clk.SetTime(clk.Now().Add(9 * time.Second))
		plan(t, p, orig, b, a)
		clk.SetTime(clk.Now().Add(2 * time.Second))
		plan(t, p, orig, a, b)
		if n := p.BlockedCount(); n != 0 {
			t.Errorf("BlockedCount after expiry = %d", n)
		}
		if s := state(p, a); s != StateUsable {
			t.Errorf("state of a after the block = %s", s)
		}
	})
	t.Run("the original blocked: alternatives first, the original as a last resort", func(t *testing.T) {
		p, _ := newTestPool(a, b)
		p.failed(orig, NetworkFailure, netErr, 0)
		plan(t, p, a, b, orig)
	})
	t.Run("certificate block lasts forever, even after a network failure", func(t *testing.T) {
		p, clk := newTestPool(a, b)
		p.failed(a, CertificateFailure, errors.New("x509"), 0)
		p.failed(a, NetworkFailure, netErr, 0)
		p.succeeded(a, orig, nil) // cannot happen, and must not unblock it
		clk.SetTime(clk.Now().Add(1000 * time.Hour))
		plan(t, p, orig, b) // never even as a last resort
		hs := p.Hosts()
		if !hs[0].BlockedForever || hs[0].Host != a || hs[0].State != StateRejected {
			t.Errorf("Hosts = %+v", hs)
		}
	})
	t.Run("not ready: blocked for its Retry-After, at most the block duration", func(t *testing.T) {
		p, clk := newTestPool(a, b)
		p.failed(a, NotReadyFailure, nil, 2*time.Second)
		p.failed(b, NotReadyFailure, nil, time.Hour)
		if s := state(p, a); s != StateInitializing {
			t.Errorf("state of a = %s", s)
		}
		plan(t, p, orig) // not ready is no last resort: it said so itself
		clk.SetTime(clk.Now().Add(3 * time.Second))
		plan(t, p, orig, a)
		clk.SetTime(clk.Now().Add(8 * time.Second))
		plan(t, p, orig, a, b)
	})
	t.Run("not the host's fault blocks nothing", func(t *testing.T) {
		p, _ := newTestPool(a)
		p.failed(a, NotHostFailure, errors.New("canceled"), 0)
		plan(t, p, orig, a)
	})
	t.Run("all blocked falls back to the original, then the soonest unblocked", func(t *testing.T) {
		p, clk := newTestPool(a, b)
		p.failed(b, NetworkFailure, netErr, 0)
		clk.SetTime(clk.Now().Add(time.Second))
		p.failed(a, NetworkFailure, netErr, 0)
		clk.SetTime(clk.Now().Add(time.Second))
		p.failed(orig, NetworkFailure, netErr, 0)
		plan(t, p, orig, b, a)
	})
	t.Run("sticks to the host that worked", func(t *testing.T) {
		p, _ := newTestPool(a, b)
		if prev := p.succeeded(b, orig, nil); prev != orig {
			t.Errorf("first switch reported from %q, want the original", prev)
		}
		if prev := p.succeeded(b, orig, nil); prev != "" {
			t.Errorf("second success reported a switch from %q", prev)
		}
		plan(t, p, b, orig, a)
		if p.Current() != b {
			t.Errorf("Current = %q", p.Current())
		}
		p.failed(b, NetworkFailure, netErr, 0)
		if p.Current() != "" {
			t.Errorf("Current after failure = %q", p.Current())
		}
		plan(t, p, orig, a, b)
	})
	t.Run("learned hosts replace configured ones, expire, refresh and clear", func(t *testing.T) {
		p, clk := newTestPool(a)
		p.succeeded(orig, orig, []string{`h2="10.0.0.3:6443"; ma=60, h3="10.0.0.9:1", h2=":6443"; ma=60`})
		plan(t, p, orig, b)
		clk.SetTime(clk.Now().Add(50 * time.Second))
		p.succeeded(orig, orig, []string{`h2="10.0.0.3:6443"; ma=60, h3="10.0.0.9:1", h2=":6443"; ma=60`}) // refresh
		clk.SetTime(clk.Now().Add(50 * time.Second))
		plan(t, p, orig, b)
		clk.SetTime(clk.Now().Add(11 * time.Second))
		plan(t, p, orig, a) // expired: back to the configured host
		// The same header as before the expiry is learned again.
		p.succeeded(orig, orig, []string{`h2="10.0.0.3:6443"; ma=60, h3="10.0.0.9:1", h2=":6443"; ma=60`})
		plan(t, p, orig, b)
		// A working original that is not listed (a load balancer's address)
		// keeps its place.
		p.succeeded(orig, orig, []string{`h2="10.0.0.3:6443"`})
		plan(t, p, orig, b)
		p.succeeded(orig, orig, []string{"clear"})
		plan(t, p, orig, a) // the configured hosts again
	})
	t.Run("malformed header keeps what was learned", func(t *testing.T) {
		p, _ := newTestPool()
		p.succeeded(b, orig, []string{`h2="10.0.0.3:6443"`})
		p.succeeded(b, orig, []string{`h2="10.0.0.3:6443`})
		plan(t, p, b, orig)
	})
	t.Run("several header lines are one list", func(t *testing.T) {
		p, _ := newTestPool()
		p.succeeded(a, orig, []string{`h2="10.0.0.2:6443"`, `h2="10.0.0.3:6443"`})
		plan(t, p, a, orig, b)
	})
}

func TestPoolCacheFile(t *testing.T) {
	const orig = "10.0.0.1:6443"
	dir := t.TempDir()
	file := filepath.Join(dir, "c.json")
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	p := newPool(nil, 10*time.Second, clk, func(string) bool { return false }, 0)
	p.cacheFile = file
	p.succeeded(orig, orig, []string{`h2="10.0.0.2:6443"; ma=60, h2="10.0.0.3:6443"; ma=600`})
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("cache file mode %v, want 0600", st.Mode().Perm())
	}

	// A new process, 2 minutes later, while the original is down: it knows
	// the host that has not expired.
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	q := newPool(nil, 10*time.Second, clk, func(string) bool { return false }, 0)
	q.cacheFile = file
	q.loadCache()
	q.failed(orig, NetworkFailure, errors.New("refused"), 0)
	if got, want := q.plan(orig), []string{"10.0.0.3:6443", orig}; !reflect.DeepEqual(got, want) {
		t.Errorf("plan after loading the cache = %v, want %v", got, want)
	}

	// Damaged, oversized or foreign files are ignored, never fatal, and
	// left as they are.
	for name, content := range map[string]string{
		"torn":       `{"hosts":[{"host":"10.0.0.3:6443","expi`,
		"not a host": `{"hosts":[{"host":"no port","expires":"2100-01-01T00:00:00Z"}]}`,
		"huge":       `{"hosts":[` + string(make([]byte, maxCacheFile)) + `]}`,
	} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		r := newPool([]string{"10.0.0.9:6443"}, 10*time.Second, clk, func(string) bool { return false }, 0)
		r.cacheFile = file
		r.loadCache()
		if got, want := r.plan(orig), []string{orig, "10.0.0.9:6443"}; !reflect.DeepEqual(got, want) {
			t.Errorf("%s: plan = %v, want %v", name, got, want)
		}
		if b, _ := os.ReadFile(file); string(b) != content {
			t.Errorf("%s: the file was changed", name)
		}
	}
}

// TestCachedPlanIsTheFreshPlan drives a pool through random failures,
// answers, Alt-Svc headers and the passing of time, and checks after each
// step that the plan it keeps is the plan it would make afresh.
func TestCachedPlanIsTheFreshPlan(t *testing.T) {
	const orig = "10.0.0.1:6443"
	hosts := []string{orig, "10.0.0.2:6443", "10.0.0.3:6443", "10.0.0.4:6443"}
	headers := []string{`h2="10.0.0.2:6443"; ma=5, h2="10.0.0.3:6443"; ma=20`, `h2="10.0.0.4:6443"; ma=3`, "clear"}
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	p := newPool(hosts[1:3], 10*time.Second, clk, func(h string) bool { return h == hosts[3] }, 7)
	rng := rand.New(rand.NewPCG(1, 2))
	for step := 0; step < 5000; step++ {
		h := hosts[rng.IntN(len(hosts))]
		switch rng.IntN(6) {
		case 0:
			p.failed(h, NetworkFailure, errors.New("refused"), 0)
		case 1:
			p.failed(h, NotReadyFailure, errors.New("503"), time.Duration(rng.IntN(15))*time.Second)
		case 2:
			if rng.IntN(20) == 0 {
				p.failed(h, CertificateFailure, errors.New("x509"), 0)
			}
		case 3:
			p.succeeded(h, orig, []string{headers[rng.IntN(len(headers))]})
		case 4:
			p.succeeded(h, orig, nil)
		case 5:
			clk.SetTime(clk.Now().Add(time.Duration(rng.IntN(4000)) * time.Millisecond))
		}
		kept := slices.Clone(p.plan(orig))
		p.mu.Lock()
		p.cached = cachedPlan{}
		p.mu.Unlock()
		if fresh := p.plan(orig); !reflect.DeepEqual(kept, fresh) {
			t.Fatalf("step %d: kept plan %v, fresh plan %v", step, kept, fresh)
		}
	}
}

func BenchmarkPlan(b *testing.B) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	p := newPool([]string{"10.0.0.2:6443", "10.0.0.3:6443"}, 10*time.Second, clk, func(string) bool { return false }, 7)
	b.ReportAllocs()
	for b.Loop() {
		p.plan("10.0.0.1:6443")
	}
}
