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
	// system (or the registries file) trusts.
	InsecureRegistries []string
	// Registries is the node's registries file: mirrors, logins, CAs; nil
	// for none.
	Registries *Registries
	// Transport is the HTTP transport under the registry client (nil:
	// Go's default, with the system's roots).
	Transport http.RoundTripper
	// Unpack says how layers are unpacked.
	Unpack UnpackOptions
}

// Pull pulls ref (a tag or a digest) for this machine's platform and adds
// it to the store under ref's own name, trying the registry's mirrors
// first. At each place, the registries file's login and then each of creds
// (the pod's, for the registry itself) is tried in turn, then none, moving
// on only when the registry refuses the credential.
func (p *Puller) Pull(ctx context.Context, ref string, creds []authn.AuthConfig) (Image, error) {
	r, n, err := Normalize(ref)
	if err != nil {
		return Image{}, err
	}
	regs := p.Registries
	if regs == nil {
		regs = &Registries{}
	}
	plain := regs.plainHosts()
	allowed := func(host string) bool { return p.insecure(host) || slices.Contains(plain, host) }
	base := p.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	var lastErr error
	for _, e := range regs.endpoints(r.Context().RegistryStr()) {
		opts := []name.Option{name.WithDefaultRegistry(e.host)}
		if e.plain || allowed(e.host) {
			opts = append(opts, name.Insecure)
		}
		at, err := retarget(r, e.host, opts...)
		if err != nil {
			return Image{}, err
		}
		tr, err := regs.transport(e.host, base)
		if err != nil {
			return Image{}, err
		}
		var logins []authn.AuthConfig
		if l, ok := regs.login(e.host); ok {
			logins = append(logins, l)
		}
		if e.host == r.Context().RegistryStr() {
			logins = append(logins, creds...)
		}
		img, err := fetch(ctx, at, logins, &plainHTTPGuard{base: tr, allowed: allowed})
		if err != nil {
			lastErr = fmt.Errorf("%s: %w", e.host, err)
			continue
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

// retarget is r at registry host: the same repository and tag or digest.
func retarget(r name.Reference, host string, opts ...name.Option) (name.Reference, error) {
	repo := r.Context().RepositoryStr()
	if d, ok := r.(name.Digest); ok {
		return name.NewDigest(host+"/"+repo+"@"+d.DigestStr(), opts...)
	}
	return name.NewTag(host+"/"+repo+":"+r.Identifier(), opts...)
}

// fetch reads the image at r with each login in turn, then anonymously.
func fetch(ctx context.Context, r name.Reference, logins []authn.AuthConfig, tr http.RoundTripper) (v1.Image, error) {
	auths := make([]authn.Authenticator, 0, len(logins)+1)
	for _, c := range logins {
		auths = append(auths, authn.FromConfig(c))
	}
	auths = append(auths, authn.Anonymous)
	var lastErr error
	for _, auth := range auths {
		img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(tr),
			remote.WithPlatform(v1.Platform{OS: "linux", Architecture: goruntime.GOARCH}))
		if err == nil {
			return img, nil
		}
		lastErr = err
		if !refusedCredential(err) {
			return nil, err
		}
	}
	return nil, lastErr
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
