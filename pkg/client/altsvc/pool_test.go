package altsvc

import (
	"errors"
	"reflect"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestPool(t *testing.T) {
	const orig, a, b = "10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"
	netErr := errors.New("connection refused")
	newTestPool := func(configured ...string) (*Pool, *clocktesting.FakePassiveClock) {
		clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
		return newPool(configured, 10*time.Second, clk, func(string) bool { return false }), clk
	}
	plan := func(t *testing.T, p *Pool, want ...string) {
		t.Helper()
		if got := p.plan(orig); !reflect.DeepEqual(got, want) {
			t.Fatalf("plan = %v, want %v", got, want)
		}
	}

	t.Run("network block expires", func(t *testing.T) {
		p, clk := newTestPool(a, b)
		plan(t, p, a, b, orig)
		if !p.failed(a, NetworkFailure, netErr) {
			t.Fatal("first failure should report a new block")
		}
		if p.failed(a, NetworkFailure, netErr) {
			t.Fatal("second failure of a blocked host reported as new")
		}
		plan(t, p, b, orig, a)
		clk.SetTime(clk.Now().Add(9 * time.Second))
		plan(t, p, b, orig, a)
		clk.SetTime(clk.Now().Add(2 * time.Second))
		plan(t, p, a, b, orig)
		if n := p.BlockedCount(); n != 0 {
			t.Errorf("BlockedCount after expiry = %d", n)
		}
	})
	t.Run("certificate block lasts forever, even after a network failure", func(t *testing.T) {
		p, clk := newTestPool(a, b)
		p.failed(a, CertificateFailure, errors.New("x509"))
		p.failed(a, NetworkFailure, netErr)
		clk.SetTime(clk.Now().Add(1000 * time.Hour))
		plan(t, p, b, orig) // never even as a last resort
		hs := p.Hosts()
		if !hs[0].BlockedForever || hs[0].Host != a {
			t.Errorf("Hosts = %+v", hs)
		}
	})
	t.Run("not the host's fault blocks nothing", func(t *testing.T) {
		p, _ := newTestPool(a)
		p.failed(a, NotHostFailure, errors.New("canceled"))
		plan(t, p, a, orig)
	})
	t.Run("all blocked falls back to the original, then the soonest unblocked", func(t *testing.T) {
		p, clk := newTestPool(a, b)
		p.failed(b, NetworkFailure, netErr)
		clk.SetTime(clk.Now().Add(time.Second))
		p.failed(a, NetworkFailure, netErr)
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
		plan(t, p, b, a, orig)
		if p.Current() != b {
			t.Errorf("Current = %q", p.Current())
		}
		p.failed(b, NetworkFailure, netErr)
		if p.Current() != "" {
			t.Errorf("Current after failure = %q", p.Current())
		}
		plan(t, p, a, orig, b)
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
		plan(t, p, a, orig) // expired: back to the configured host
		// The same header as before the expiry is learned again.
		p.succeeded(orig, orig, []string{`h2="10.0.0.3:6443"; ma=60, h3="10.0.0.9:1", h2=":6443"; ma=60`})
		plan(t, p, orig, b)
		// A host reached as the original but not listed (a load balancer's
		// address) gives way to the listed ones.
		p.succeeded(orig, orig, []string{`h2="10.0.0.3:6443"`})
		plan(t, p, b, orig)
		p.succeeded(orig, orig, []string{"clear"})
		plan(t, p, a, orig) // the configured hosts again
	})
	t.Run("malformed header keeps what was learned", func(t *testing.T) {
		p, _ := newTestPool()
		p.succeeded(orig, orig, []string{`h2="10.0.0.3:6443"`})
		p.succeeded(orig, orig, []string{`h2="10.0.0.3:6443`})
		plan(t, p, b, orig)
	})
	t.Run("several header lines are one list", func(t *testing.T) {
		p, _ := newTestPool()
		p.succeeded(orig, orig, []string{`h2="10.0.0.2:6443"`, `h2="10.0.0.3:6443"`})
		plan(t, p, a, b, orig)
	})
}
