package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var rootless = UnpackOptions{Rootless: true}

// testImage is an image of the given layers (each a list of entries) with
// cmd as its command.
func testImage(t *testing.T, cmd []string, layers ...[]entry) v1.Image {
	t.Helper()
	img := empty.Image
	for _, entries := range layers {
		b := layerTar(t, entries...)
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Cmd = cmd
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

var (
	base   = []entry{{name: "bin", typ: 'd'}, {name: "bin/sh", body: "shell", mode: 0o755}}
	appOne = []entry{{name: "app", body: "one"}}
	appTwo = []entry{{name: "app", body: "two"}}
)

func TestStoreSharesLayersAndMovesTags(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	one, err := s.Add(testImage(t, []string{"/app"}, base, appOne), []string{"example.com/app:v1", "example.com/app:latest"}, nil, rootless)
	if err != nil {
		t.Fatal(err)
	}
	two, err := s.Add(testImage(t, []string{"/app"}, base, appTwo), []string{"example.com/app:latest"}, nil, rootless)
	if err != nil {
		t.Fatal(err)
	}
	if layers, _ := os.ReadDir(filepath.Join(s.Root(), "layers")); len(layers) != 3 {
		t.Errorf("%d layer directories for two images sharing a base, want 3", len(layers))
	}
	got, ok, err := s.Get("example.com/app")
	if err != nil || !ok || got.ID != two.ID {
		t.Fatalf("Get(example.com/app) = %v %v %v, want the second image (latest moved)", got.ID, ok, err)
	}
	got, _, _ = s.Get("example.com/app:v1")
	if got.ID != one.ID || !slices.Equal(got.Names, []string{"example.com/app:v1"}) {
		t.Errorf("first image now %v named %v, want %s named only v1", got.ID, got.Names, one.ID)
	}
	dirs, err := s.LayerDirs(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != 2 || readFile(t, filepath.Join(dirs[0], "app")) != "one" || readFile(t, filepath.Join(dirs[1], "bin/sh")) != "shell" {
		t.Errorf("layer dirs %v: want the app layer on top of the base", dirs)
	}
	if cf, err := s.Config(got.ID); err != nil || !slices.Equal(cf.Config.Cmd, []string{"/app"}) {
		t.Errorf("Config = %v, %v", cf, err)
	}

	// Removing the first image deletes its own layer and keeps the shared
	// one; a lease keeps a layer a container still stacks.
	if err := s.Lease("ctr", two); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove("example.com/app:v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove("example.com/app:latest"); err != nil {
		t.Fatal(err)
	}
	if layers, _ := os.ReadDir(filepath.Join(s.Root(), "layers")); len(layers) != 2 {
		t.Errorf("%d layers left with the second image leased, want 2", len(layers))
	}
	if err := s.Release("ctr"); err != nil {
		t.Fatal(err)
	}
	if err := s.Prune(); err != nil {
		t.Fatal(err)
	}
	if layers, _ := os.ReadDir(filepath.Join(s.Root(), "layers")); len(layers) != 0 {
		t.Errorf("%d layers left after the lease ended, want 0", len(layers))
	}
	if _, err := s.Remove("example.com/app:v1"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removing a missing image: %v, want not exist", err)
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"nginx", "docker.io/library/nginx:latest"},
		{"busybox:1.36", "docker.io/library/busybox:1.36"},
		{"docker.io/library/nginx", "docker.io/library/nginx:latest"},
		{"user/app", "docker.io/user/app:latest"},
		{"127.0.0.1:5000/app:v2", "127.0.0.1:5000/app:v2"},
		{"registry.k8s.io/pause@sha256:" + strings.Repeat("a", 64), "registry.k8s.io/pause@sha256:" + strings.Repeat("a", 64)},
	}
	for _, tc := range tests {
		_, got, err := Normalize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "UPPER/case", "a b", "x:y:z", "nginx@sha256:short"} {
		if _, _, err := Normalize(bad); err == nil {
			t.Errorf("Normalize(%q) accepted", bad)
		}
	}
}

// TestPullFromLoopbackRegistry pulls by tag and by digest from a real
// registry on 127.0.0.1, with credentials tried in order.
func TestPullFromLoopbackRegistry(t *testing.T) {
	reg := registry.New()
	var wrongLogins atomic.Int32 // handlers run at once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); ok && (u != "puller" || p != "secret") {
			wrongLogins.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "wrong", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodGet && r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "login", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img := testImage(t, []string{"/app"}, base, appOne)
	ref, err := name.ParseReference(host + "/team/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: "puller", Password: "secret"})); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := &Puller{Store: s, Unpack: rootless}
	ctx := context.Background()

	if _, err := p.Pull(ctx, host+"/team/app:v1", nil); err == nil {
		t.Fatal("pulled without credentials from a registry that wants them")
	}
	creds := []authn.AuthConfig{{Username: "someone", Password: "else"}, {Username: "puller", Password: "secret"}}
	got, err := p.Pull(ctx, host+"/team/app:v1", creds)
	if err != nil {
		t.Fatal(err)
	}
	if wrongLogins.Load() == 0 {
		t.Error("the first credential was never tried")
	}
	wantID, _ := img.ConfigName()
	digest, _ := img.Digest()
	if got.ID != wantID.String() || !slices.Equal(got.Names, []string{host + "/team/app:v1"}) || !slices.Equal(got.RepoDigests, []string{host + "/team/app@" + digest.String()}) {
		t.Errorf("pulled %+v", got)
	}
	byDigest, err := p.Pull(ctx, host+"/team/app@"+digest.String(), creds)
	if err != nil || byDigest.ID != got.ID {
		t.Errorf("pull by digest = %v, %v", byDigest.ID, err)
	}
	if _, ok, _ := s.Get(host + "/team/app@" + digest.String()); !ok {
		t.Error("the image is not found by its digest")
	}
	if _, err := p.Pull(ctx, host+"/team/missing:v1", creds); err == nil {
		t.Error("pulled an image the registry does not have")
	}
}

// TestPlainHTTPOnlyToLoopback: the registry library would use plain HTTP
// for private addresses by itself; the guard refuses it before dialling.
func TestPlainHTTPOnlyToLoopback(t *testing.T) {
	dialled := false
	g := &plainHTTPGuard{base: roundTripFunc(func(*http.Request) (*http.Response, error) {
		dialled = true
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	}), allowed: (&Puller{InsecureRegistries: []string{"registry.lab:5000"}}).insecure}
	tests := []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:5000/v2/", true},
		{"http://localhost:5000/v2/", true},
		{"http://[::1]:5000/v2/", true},
		{"http://registry.lab:5000/v2/", true},
		{"http://10.1.2.3:5000/v2/", false},
		{"http://registry.lab/v2/", false},
		{"https://10.1.2.3:5000/v2/", true},
	}
	for _, tc := range tests {
		dialled = false
		req, _ := http.NewRequest(http.MethodGet, tc.url, nil)
		_, err := g.RoundTrip(req)
		if (err == nil) != tc.ok || dialled != tc.ok {
			t.Errorf("%s: err %v, dialled %v; want allowed %v", tc.url, err, dialled, tc.ok)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestImportArchives(t *testing.T) {
	img := testImage(t, []string{"/app"}, base, appOne)
	wantID, _ := img.ConfigName()
	dir := t.TempDir()

	dockerSave := filepath.Join(dir, "docker.tar")
	tag, _ := name.NewTag("app:v1")
	if err := tarball.WriteToFile(dockerSave, tag, img); err != nil {
		t.Fatal(err)
	}
	dockerGz := filepath.Join(dir, "docker.tar.gz")
	gzipFile(t, dockerSave, dockerGz)

	lp, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{annotationRefName: "example.com/app:oci"})); err != nil {
		t.Fatal(err)
	}
	ociTar := filepath.Join(dir, "oci.tar")
	tarDir(t, filepath.Join(dir, "oci"), ociTar)

	for _, tc := range []struct{ file, name string }{
		{dockerSave, "docker.io/library/app:v1"},
		{dockerGz, "docker.io/library/app:v1"},
		{ociTar, "example.com/app:oci"},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Import(tc.file, rootless)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].ID != wantID.String() || !slices.Equal(got[0].Names, []string{tc.name}) {
				t.Fatalf("imported %+v, want %s named %s", got, wantID, tc.name)
			}
			got0, _, _ := s.Get(tc.name)
			dirs, err := s.LayerDirs(got0)
			if err != nil || readFile(t, filepath.Join(dirs[0], "app")) != "one" {
				t.Errorf("layers %v, %v", dirs, err)
			}
		})
	}

	s, _ := Open(t.TempDir())
	bad := filepath.Join(dir, "bad.tar")
	if err := os.WriteFile(bad, layerTar(t, entry{name: "hello", body: "x"}), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(bad, rootless); err == nil || !strings.Contains(err.Error(), "bad.tar") {
		t.Errorf("importing a tar that is no image archive: %v, want an error naming it", err)
	}
	if imgs, _ := s.List(); len(imgs) != 0 {
		t.Errorf("a failed import left images: %v", imgs)
	}
}

func gzipFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	if err := os.WriteFile(dst, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func tarDir(t *testing.T, dir, dst string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	if err := os.WriteFile(dst, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestPullThroughMirror: a registry's mirror (named plain http:// in the
// registries file, with a login of the file's) is tried first; the image
// keeps the name the pod gave.
func TestPullThroughMirror(t *testing.T) {
	mirrorReg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	var mirrorLogins atomic.Int32 // handlers run at once
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); ok && u == "edge" && p == "pw" {
			mirrorLogins.Add(1)
		} else if r.Method == http.MethodGet {
			w.Header().Set("WWW-Authenticate", `Basic realm="mirror"`)
			http.Error(w, "login", http.StatusUnauthorized)
			return
		}
		mirrorReg.ServeHTTP(w, r)
	}))
	defer mirror.Close()
	mirrorHost := strings.TrimPrefix(mirror.URL, "http://")
	img := testImage(t, []string{"/app"}, base, appOne)
	ref, _ := name.ParseReference(mirrorHost + "/library/app:v1")
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: "edge", Password: "pw"})); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "registries.yaml")
	body := "mirrors:\n  docker.io:\n    endpoint: [\"http://" + mirrorHost + "\"]\nconfigs:\n  \"" + mirrorHost + "\":\n    auth: {username: edge, password: pw}\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	regs, err := LoadRegistries(file)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Open(t.TempDir())
	// docker.io itself is never dialled: the mirror has the image, and a
	// transport that refuses every host but loopback makes sure.
	loopbackOnly := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if !isLoopback(r.URL.Host) {
			t.Errorf("dialled %s", r.URL.Host)
			return nil, fmt.Errorf("the test dials only 127.0.0.1")
		}
		return http.DefaultTransport.RoundTrip(r)
	})
	got, err := (&Puller{Store: s, Registries: regs, Transport: loopbackOnly, Unpack: rootless}).Pull(context.Background(), "app:v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Names, []string{"docker.io/library/app:v1"}) || mirrorLogins.Load() == 0 {
		t.Errorf("pulled %+v with %d mirror logins; want it named docker.io/library/app:v1, logged in with the file's login", got, mirrorLogins.Load())
	}
}

func TestLoadRegistriesRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"insecure_skip_verify": "configs:\n  r.example.com:\n    tls: {insecure_skip_verify: true}\n",
		"a bad endpoint":       "mirrors:\n  docker.io:\n    endpoint: [\"ftp://x\"]\n",
		"an unknown field":     "mirror:\n  docker.io: {}\n",
		"a missing CA file":    "configs:\n  r.example.com:\n    tls: {ca_file: /nonexistent/ca.pem}\n",
	} {
		p := filepath.Join(t.TempDir(), "registries.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadRegistries(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if r, err := LoadRegistries(filepath.Join(t.TempDir(), "none.yaml")); err != nil || len(r.Mirrors) != 0 {
		t.Errorf("a missing file: %v, %v; want no mirrors", r, err)
	}
}

// TestPruneDuringAPullKeepsItsLayers: a Prune (an image removed, the
// garbage collector) between two layers of a pull leaves the layers
// unpacked so far, which no image names yet; the pull's lease is gone
// after it.
func TestPruneDuringAPullKeepsItsLayers(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	img := testImage(t, []string{"/app"}, base, appOne)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	pruned := false
	layers[1] = hookLayer{Layer: layers[1], before: func() {
		pruned = s.Prune() == nil
	}}
	added, err := s.Add(hookImage{Image: img, layers: layers}, []string{"example.com/app:v1"}, nil, rootless)
	if err != nil {
		t.Fatal(err)
	}
	if !pruned {
		t.Fatal("the prune between the layers did not run")
	}
	dirs, err := s.LayerDirs(added)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("layer %s of the pulled image: %v", d, err)
		}
	}
	if leases, _ := os.ReadDir(filepath.Join(s.Root(), "leases")); len(leases) != 0 {
		t.Errorf("leases after the pull: %v, want none", leases)
	}
}

// hookLayer runs before when its content is first read.
type hookLayer struct {
	v1.Layer
	before func()
}

func (l hookLayer) Uncompressed() (io.ReadCloser, error) {
	l.before()
	return l.Layer.Uncompressed()
}

// hookImage is an image with its layers replaced.
type hookImage struct {
	v1.Image
	layers []v1.Layer
}

func (i hookImage) Layers() ([]v1.Layer, error) { return i.layers, nil }
