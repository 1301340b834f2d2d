// Package testnet makes network failures for tests, on loopback addresses.
package testnet

import (
	"net"
	"sync"
	"testing"

	"github.com/steadyplane/steadyplane/internal/testci"
)

// BlackHole listens on ip and accepts connections without ever answering
// on them: to a client, a server behind a partition once its TCP
// connection is made (the TLS handshake never ends). It returns the
// address; the listener and the connections close when the test ends.
func BlackHole(t testing.TB, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		testci.CannotRun(t, "cannot listen on %s: %v", ip, err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// Freezer is a TCP proxy on a loopback address in front of a server that
// can be frozen: while frozen it forwards nothing, in either direction and
// on new connections as on old ones, as a paused server or a black-holed
// link would; thawed, it forwards what it held. Connections stay open.
type Freezer struct {
	addr string

	mu     sync.Mutex
	thawed chan struct{} // closed while not frozen
	closed chan struct{}
}

// Freeze starts a Freezer on ip in front of target and returns it; it
// closes when the test ends.
func Freeze(t testing.TB, ip, target string) *Freezer {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		testci.CannotRun(t, "cannot listen on %s: %v", ip, err)
	}
	f := &Freezer{addr: l.Addr().String(), thawed: make(chan struct{}), closed: make(chan struct{})}
	close(f.thawed)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !f.wait() {
					return
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				track(up)
				wg.Add(2)
				go func() { defer wg.Done(); f.pipe(up, c) }()
				go func() { defer wg.Done(); f.pipe(c, up) }()
			}()
		}
	}()
	t.Cleanup(func() {
		close(f.closed)
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return f
}

// Addr is the proxy's address.
func (f *Freezer) Addr() string { return f.addr }

// Freeze stops all forwarding until Thaw.
func (f *Freezer) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
		f.thawed = make(chan struct{})
	default:
	}
}

// Thaw forwards again, what was held first.
func (f *Freezer) Thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
	default:
		close(f.thawed)
	}
}

// wait returns once the proxy is not frozen: true, or false when it closed.
func (f *Freezer) wait() bool {
	f.mu.Lock()
	thawed := f.thawed
	f.mu.Unlock()
	select {
	case <-thawed:
		return true
	case <-f.closed:
		return false
	}
}

// pipe copies from src to dst, holding each read while frozen.
func (f *Freezer) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !f.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
