package images

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"sigs.k8s.io/yaml"
)

// Registries is the node's registries file, in the format of k3s's
// registries.yaml (the parts steadyplane honours): mirrors to try before a
// registry, and per registry host a login and a CA to trust. TLS
// verification is never switched off; plain HTTP is allowed to an endpoint
// the file names with http://.
type Registries struct {
	// Mirrors maps a registry ("docker.io", or "*" for every registry) to
	// the endpoints tried, in order, before the registry itself.
	Mirrors map[string]Mirror `json:"mirrors,omitempty"`
	// Configs maps a registry host (host[:port]) to how to reach it.
	Configs map[string]RegistryConfig `json:"configs,omitempty"`
}

// Mirror is a registry's mirrors.
type Mirror struct {
	// Endpoints are URLs: https://host[:port], or http:// to allow plain
	// HTTP to that host.
	Endpoints []string `json:"endpoint"`
}

// RegistryConfig is how to reach one registry host.
type RegistryConfig struct {
	Auth *authn.AuthConfig `json:"auth,omitempty"`
	TLS  *RegistryTLS      `json:"tls,omitempty"`
}

// RegistryTLS is the TLS of a registry host.
type RegistryTLS struct {
	// CAFile is a PEM bundle trusted besides the system's roots.
	CAFile string `json:"ca_file,omitempty"`
	// InsecureSkipVerify is refused: verification stays on.
	InsecureSkipVerify bool `json:"insecure_skip_verify,omitempty"`
}

// LoadRegistries reads a registries file; "" or a file that does not exist
// is no mirrors and no configs.
func LoadRegistries(path string) (*Registries, error) {
	r := &Registries{}
	if path == "" {
		return r, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(b, r); err != nil {
		return nil, fmt.Errorf("registries file %s: %w", path, err)
	}
	for reg, m := range r.Mirrors {
		for _, e := range m.Endpoints {
			if _, _, err := parseEndpoint(e); err != nil {
				return nil, fmt.Errorf("registries file %s: mirror of %s: %w", path, reg, err)
			}
		}
	}
	for host, c := range r.Configs {
		if c.TLS != nil && c.TLS.InsecureSkipVerify {
			return nil, fmt.Errorf("registries file %s: %s: insecure_skip_verify is refused (TLS verification stays on): give its CA as ca_file, or an http:// mirror endpoint", path, host)
		}
		if c.TLS != nil && c.TLS.CAFile != "" {
			if _, err := os.ReadFile(c.TLS.CAFile); err != nil {
				return nil, fmt.Errorf("registries file %s: %s: ca_file: %w", path, host, err)
			}
		}
	}
	return r, nil
}

// parseEndpoint returns an endpoint's host and whether it is plain HTTP.
func parseEndpoint(e string) (host string, plain bool, err error) {
	u, err := url.Parse(e)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false, fmt.Errorf("endpoint %q: want http://host[:port] or https://host[:port]", e)
	}
	if u.Path != "" && u.Path != "/" && u.Path != "/v2" && u.Path != "/v2/" {
		return "", false, fmt.Errorf("endpoint %q: a path prefix is not supported", e)
	}
	return u.Host, u.Scheme == "http", nil
}

// endpoint is one place to pull a registry's image from.
type endpoint struct {
	host  string
	plain bool
}

// endpoints returns where to pull from registry, in order: its mirrors,
// the "*" mirrors, then the registry itself. Docker Hub answers to both of
// its names.
func (r *Registries) endpoints(registry string) []endpoint {
	var out []endpoint
	keys := []string{registry}
	if registry == "index.docker.io" {
		keys = append(keys, "docker.io")
	}
	for _, k := range append(keys, "*") {
		for _, e := range r.Mirrors[k].Endpoints {
			if host, plain, err := parseEndpoint(e); err == nil {
				out = append(out, endpoint{host, plain})
			}
		}
	}
	return append(out, endpoint{host: registry})
}

// plainHosts are the hosts the file allows plain HTTP to.
func (r *Registries) plainHosts() []string {
	var out []string
	for _, m := range r.Mirrors {
		for _, e := range m.Endpoints {
			if host, plain, err := parseEndpoint(e); err == nil && plain {
				out = append(out, host)
			}
		}
	}
	return out
}

// login returns the file's login for host, if it has one.
func (r *Registries) login(host string) (authn.AuthConfig, bool) {
	c, ok := r.Configs[host]
	if !ok && host == "index.docker.io" {
		c, ok = r.Configs["docker.io"]
	}
	if !ok || c.Auth == nil {
		return authn.AuthConfig{}, false
	}
	return *c.Auth, true
}

// transport returns base, trusting the CA the file gives for host.
func (r *Registries) transport(host string, base http.RoundTripper) (http.RoundTripper, error) {
	c, ok := r.Configs[strings.TrimPrefix(host, "index.")]
	if !ok {
		c, ok = r.Configs[host]
	}
	if !ok || c.TLS == nil || c.TLS.CAFile == "" {
		return base, nil
	}
	pem, err := os.ReadFile(c.TLS.CAFile)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: ca_file %s holds no PEM certificate", host, c.TLS.CAFile)
	}
	t, ok := base.(*http.Transport)
	if !ok {
		t = http.DefaultTransport.(*http.Transport)
	}
	t = t.Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}
