package altsvcclient

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"

	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

// CacheFileName is the name of the cache file of the cluster at origin
// trusted through ca (PEM): a hash of both, so that two clusters never share
// a file.
func CacheFileName(origin string, ca []byte) string {
	h := sha256.New()
	h.Write([]byte(origin))
	h.Write([]byte{0})
	h.Write(ca)
	return hex.EncodeToString(h.Sum(nil)[:16]) + ".json"
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
		p.gen++
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
