package pki

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// ServingPair serves a certificate and key from files that are renewed
// while the server runs: GetCertificate reads them again when either
// changed, looking at most once a second, so a renewal reaches the next
// handshake and open connections go on. A pair that does not load (a
// renewal half written by another program) leaves the last good one
// served.
type ServingPair struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// LoadServingPair loads certFile and keyFile; an error names them.
func LoadServingPair(certFile, keyFile string) (*ServingPair, error) {
	p := &ServingPair{certFile: certFile, keyFile: keyFile}
	stamp := p.stat()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the serving certificate %s and key %s: %w", certFile, keyFile, err)
	}
	p.cert, p.stamp, p.checked = &cert, stamp, time.Now()
	return p, nil
}

func (p *ServingPair) stat() [2]fileStamp {
	var out [2]fileStamp
	for i, f := range []string{p.certFile, p.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			out[i] = fileStamp{fi.ModTime(), fi.Size()}
		}
	}
	return out
}

// GetCertificate is a tls.Config's GetCertificate.
func (p *ServingPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.checked) >= time.Second {
		p.checked = now
		if stamp := p.stat(); stamp != p.stamp {
			if cert, err := tls.LoadX509KeyPair(p.certFile, p.keyFile); err == nil {
				p.cert, p.stamp = &cert, stamp
			}
		}
	}
	return p.cert, nil
}
