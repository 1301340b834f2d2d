package images

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	goruntime "runtime"
	"slices"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Puller pulls images from registries into a Store.
type Puller struct {
	Store *Store
	// InsecureRegistries ("host" or "host:port") may be reached over
	// plain HTTP. Registries on loopback addresses always may, as Docker
	// allows; every other registry must speak TLS with a certificate the
	// system trusts.
	InsecureRegistries []string
	// Transport is the HTTP transport under the registry client (nil:
	// Go's default, with the system's roots).
	Transport http.RoundTripper
	// Unpack says how layers are unpacked.
	Unpack UnpackOptions
}

// Pull pulls ref (a tag or a digest) for this machine's platform and adds
// it to the store. Each of creds is tried in turn, then no credentials,
// moving on only when the registry refuses the credential.
func (p *Puller) Pull(ctx context.Context, ref string, creds []authn.AuthConfig) (Image, error) {
	r, n, err := Normalize(ref)
	if err != nil {
		return Image{}, err
	}
	if p.insecure(r.Context().RegistryStr()) {
		if r, err = name.ParseReference(ref, name.WithDefaultRegistry(name.DefaultRegistry), name.Insecure); err != nil {
			return Image{}, err
		}
	}
	base := p.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	tr := &plainHTTPGuard{base: base, allowed: p.insecure}
	auths := make([]authn.Authenticator, 0, len(creds)+1)
	for _, c := range creds {
		auths = append(auths, authn.FromConfig(c))
	}
	auths = append(auths, authn.Anonymous)
	var lastErr error
	for _, auth := range auths {
		img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(tr),
			remote.WithPlatform(v1.Platform{OS: "linux", Architecture: goruntime.GOARCH}))
		if err != nil {
			lastErr = err
			if refusedCredential(err) {
				continue
			}
			return Image{}, err
		}
		digest, err := img.Digest()
		if err != nil {
			return Image{}, err
		}
		var names []string
		if _, isTag := r.(name.Tag); isTag {
			names = []string{n}
		}
		return p.Store.Add(img, names, []string{repoDigest(r, digest)}, p.Unpack)
	}
	return Image{}, lastErr
}

// refusedCredential tells a registry's refusal of the credentials (try the
// next) from every other failure.
func refusedCredential(err error) bool {
	var terr *transport.Error
	if errors.As(err, &terr) {
		return terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden
	}
	return false
}

// insecure tells whether registry host may be reached over plain HTTP.
func (p *Puller) insecure(host string) bool {
	return slices.Contains(p.InsecureRegistries, host) || isLoopback(host)
}

func isLoopback(hostport string) bool {
	h := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		h = hh
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// plainHTTPGuard refuses plain HTTP to a registry that may not be reached
// that way: the registry library tries HTTP for private and loopback
// addresses by itself, and credentials and images must not cross a network
// in the clear unless the node's owner said so.
type plainHTTPGuard struct {
	base    http.RoundTripper
	allowed func(host string) bool
}

func (g *plainHTTPGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !g.allowed(req.URL.Host) {
		return nil, fmt.Errorf("refusing plain HTTP to registry %s: only registries on loopback addresses, or listed as insecure in the node's registries file, are reached without TLS", req.URL.Host)
	}
	return g.base.RoundTrip(req)
}
