// Package testnet makes network failures for tests, on loopback addresses.
package testnet

import (
	"net"
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
