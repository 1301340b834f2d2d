package altsvcclient

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"

	"github.com/steadyplane/steadyplane/internal/testnet"
	"github.com/steadyplane/steadyplane/internal/testpki"
)

func TestMayHedge(t *testing.T) {
	tests := []struct {
		method                              string
		hasBody, streaming, upgrad, proxied bool
		want                                bool
	}{
		{method: http.MethodGet, want: true},
		{method: http.MethodHead, want: true},
		{method: http.MethodGet, streaming: true},            // a watch or a followed log
		{method: http.MethodGet, upgrad: true},               // exec, attach, port-forward
		{method: http.MethodGet, hasBody: true},              // a GET with a body is not a plain read
		{method: http.MethodPost},                            // a write is never sent twice
		{method: http.MethodPut}, {method: http.MethodPatch}, // idempotent or not, a write
		{method: http.MethodDelete},
		{method: http.MethodOptions},
	}
	for _, tc := range tests {
		if got := MayHedge(tc.method, tc.hasBody, tc.streaming, tc.upgrad, tc.proxied); got != tc.want {
			t.Errorf("MayHedge(%s, body=%v, streaming=%v, upgrade=%v, proxied=%v) = %v, want %v", tc.method, tc.hasBody, tc.streaming, tc.upgrad, tc.proxied, got, tc.want)
		}
	}
}

func TestHedgedReads(t *testing.T) {
	p := testpki.New(t)

	t.Run("a read to a server that never answers is answered by the next within the hedge delay", func(t *testing.T) {
		b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
		orig := testnet.BlackHole(t, "127.0.0.1")
		hc, pool := client(t, p, orig, Options{Hosts: []string{orig, b.host()}, HedgeAfter: 100 * time.Millisecond})
		start := time.Now()
		got, err := get(hc, "https://"+orig+"/api")
		took := time.Since(start)
		if err != nil || !strings.HasPrefix(got, "b ") {
			t.Fatalf("GET: %q, %v; want b's answer", got, err)
		}
		if took > 3*time.Second {
			t.Errorf("GET took %v: the hedge did not answer it (the dial timeout did)", took)
		}
		if pool.Current() != b.host() {
			t.Errorf("current host %q, want %s: the next request would wait on the black hole again", pool.Current(), b.host())
		}
		// The next read goes to b at once.
		start = time.Now()
		if got, err := get(hc, "https://"+orig+"/api"); err != nil || !strings.HasPrefix(got, "b ") || time.Since(start) > 90*time.Millisecond {
			t.Errorf("second GET: %q, %v after %v; want b's answer before any hedge", got, err, time.Since(start))
		}
	})

	t.Run("a read on a connection that stopped answering moves on; the slow host's request is ended", func(t *testing.T) {
		a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
		b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
		var stall atomic.Bool
		ended := make(chan error, 10)
		a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a.requests.Add(1)
			if stall.Load() {
				<-r.Context().Done()
				ended <- r.Context().Err()
				return
			}
			fmt.Fprint(w, "a")
		})
		hc, pool := client(t, p, a.host(), Options{Hosts: []string{a.host(), b.host()}, HedgeAfter: 100 * time.Millisecond})
		if got, err := get(hc, "https://"+a.host()+"/api"); err != nil || got != "a" {
			t.Fatalf("first GET: %q, %v", got, err)
		}
		stall.Store(true)
		start := time.Now()
		got, err := get(hc, "https://"+a.host()+"/api")
		if err != nil || !strings.HasPrefix(got, "b ") || time.Since(start) > 2*time.Second {
			t.Fatalf("GET to a stalled server: %q, %v after %v; want b's answer after the hedge delay", got, err, time.Since(start))
		}
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Error("the stalled server's request was not ended after the hedge answered")
		}
		if pool.Current() != b.host() {
			t.Errorf("current host %q, want %s", pool.Current(), b.host())
		}
	})

	t.Run("a write is never hedged", func(t *testing.T) {
		a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
		b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
		a.onPost = func(s *apiServer, w http.ResponseWriter) bool {
			time.Sleep(400 * time.Millisecond)
			return false
		}
		hc, _ := client(t, p, a.host(), Options{Hosts: []string{a.host(), b.host()}, HedgeAfter: 50 * time.Millisecond})
		got, err := post(hc, "https://"+a.host()+"/api", "once")
		if err != nil || !strings.HasPrefix(got, "a ") {
			t.Fatalf("slow POST: %q, %v; want a's answer", got, err)
		}
		if n := b.requests.Load(); n != 0 {
			t.Errorf("the slow POST reached b too (%d requests)", n)
		}
	})

	t.Run("a fast answer starts no hedge; a slow one that comes first wins", func(t *testing.T) {
		a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
		b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
		hc, pool := client(t, p, a.host(), Options{Hosts: []string{a.host(), b.host()}, HedgeAfter: 500 * time.Millisecond})
		for i := 0; i < 20; i++ {
			if got, err := get(hc, "https://"+a.host()+"/api"); err != nil || !strings.HasPrefix(got, "a ") {
				t.Fatalf("GET %d: %q, %v", i, got, err)
			}
		}
		if n := b.requests.Load(); n != 0 {
			t.Errorf("fast reads were hedged: b got %d requests", n)
		}
		// a answers after 700ms, b after 1.4s: a's answer, though b was asked.
		slow := func(s *apiServer, d time.Duration) {
			s.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s.requests.Add(1)
				select {
				case <-time.After(d):
					fmt.Fprint(w, s.name)
				case <-r.Context().Done():
				}
			})
		}
		slow(a, 700*time.Millisecond)
		slow(b, 1400*time.Millisecond)
		if got, err := get(hc, "https://"+a.host()+"/api"); err != nil || got != "a" {
			t.Errorf("GET with both slow: %q, %v; want a's, the first answer", got, err)
		}
		if n := b.requests.Load(); n != 1 {
			t.Errorf("b got %d requests, want the one hedge", n)
		}
		if pool.Current() != a.host() {
			t.Errorf("current host %q, want %s", pool.Current(), a.host())
		}
	})

	t.Run("a hedge answered 500 or 429 fast does not end a slow success", func(t *testing.T) {
		for _, status := range []int{http.StatusInternalServerError, http.StatusTooManyRequests} {
			a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
			b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
			a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(300 * time.Millisecond)
				fmt.Fprint(w, "a")
			})
			b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b.requests.Add(1)
				http.Error(w, "busy", status)
			})
			hc, pool := client(t, p, a.host(), Options{Hosts: []string{a.host(), b.host()}, HedgeAfter: 50 * time.Millisecond})
			if got, err := get(hc, "https://"+a.host()+"/api"); err != nil || got != "a" {
				t.Errorf("slow GET whose hedge got %d: %q, %v; want a's answer", status, got, err)
			}
			if n := b.requests.Load(); n != 1 {
				t.Errorf("b got %d requests, want the one hedge", n)
			}
			if pool.Current() != a.host() {
				t.Errorf("current host %q after b answered %d, want %s", pool.Current(), status, a.host())
			}
		}
	})

	t.Run("with the pool's budget of hedges spent, a slow read waits for its host", func(t *testing.T) {
		a := startServer(t, p, p.CA, "a", "127.0.0.1", false)
		b := startServer(t, p, p.CA, "b", "127.0.0.2", true)
		a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(150 * time.Millisecond)
			fmt.Fprint(w, "a")
		})
		hc, pool := client(t, p, a.host(), Options{Hosts: []string{a.host(), b.host()}, HedgeAfter: 50 * time.Millisecond})
		pool.hedges = rate.NewLimiter(0, 0)
		if got, err := get(hc, "https://"+a.host()+"/api"); err != nil || got != "a" {
			t.Errorf("slow GET over budget: %q, %v; want a's answer", got, err)
		}
		if n := b.requests.Load(); n != 0 {
			t.Errorf("b got %d requests with no hedge left in the budget", n)
		}
	})

	t.Run("the caller's deadline ends both attempts", func(t *testing.T) {
		orig := testnet.BlackHole(t, "127.0.0.1")
		other := testnet.BlackHole(t, "127.0.0.2")
		hc, _ := client(t, p, orig, Options{Hosts: []string{orig, other}, HedgeAfter: 50 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+orig+"/api", nil)
		sent := testutil.ToFloat64(metrics.hedges.WithLabelValues("sent"))
		start := time.Now()
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			t.Fatal("GET to two black holes succeeded")
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("GET past its deadline took %v", took)
		}
		if n := testutil.ToFloat64(metrics.hedges.WithLabelValues("sent")) - sent; n != 1 {
			t.Errorf("%v hedges sent, want the one to the second black hole", n)
		}
	})
}
