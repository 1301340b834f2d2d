// Package testimage builds the container images the tests run, offline: a
// busybox image made of Debian's busybox-static (every applet linked), and
// serves them from a registry on 127.0.0.1 or writes them as archives, as a
// user would bring images to a node.
package testimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/steadyplane/steadyplane/internal/testci"
	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// BusyboxBinary is Debian's busybox-static, the program of the test images.
const BusyboxBinary = "/bin/busybox"

// BusyboxName is the name the README's walkthroughs use; the tests import
// their busybox image under it, so the walkthroughs run offline as written.
const BusyboxName = "busybox:1.36"

// RequireBusybox ends t when this machine cannot build the busybox image
// (a failure in CI, a skip elsewhere).
func RequireBusybox(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(BusyboxBinary); err != nil {
		testci.CannotRun(t, "test images are made of Debian's busybox-static (apt-get install busybox-static): %v", err)
	}
}

// Busybox returns an image of busybox with every applet in /bin, an
// /etc/passwd and /etc/group with root and nobody (65534), a sticky /tmp,
// PATH set and "sh" as its command.
func Busybox() (v1.Image, error) {
	out, err := exec.Command(BusyboxBinary, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list (Debian's busybox-static): %w", err)
	}
	bin, err := os.ReadFile(BusyboxBinary)
	if err != nil {
		return nil, err
	}
	files := []File{
		{Name: "bin/", Mode: 0o755},
		{Name: "bin/busybox", Mode: 0o755, Body: bin},
		{Name: "etc/", Mode: 0o755},
		{Name: "etc/passwd", Mode: 0o644, Body: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{Name: "etc/group", Mode: 0o644, Body: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{Name: "root/", Mode: 0o700},
		{Name: "tmp/", Mode: 0o1777},
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" {
			files = append(files, File{Name: "bin/" + applet, Link: "busybox"})
		}
	}
	return Image(v1.Config{Cmd: []string{"sh"}, Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}, files)
}

// BusyboxArchive writes the busybox image, named BusyboxName, as a `docker
// save` archive at path: what a test drops into up's <data-dir>/images.
func BusyboxArchive(path string) error {
	img, err := Busybox()
	if err != nil {
		return err
	}
	return WriteArchive(path, img, BusyboxName)
}

// File is one entry of a test image's layer: a directory when Name ends in
// "/", a symbolic link when Link is set, else a regular file.
type File struct {
	Name string
	Mode int64
	Body []byte
	Link string
	UID  int
}

// Image returns an image of one layer of files with config.
func Image(config v1.Config, files []File) (v1.Image, error) {
	layer, err := Layer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	return WithConfig(img, config)
}

// Layer returns a layer of files, in memory.
func Layer(files []File) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1700000000, 0)
	for _, f := range files {
		hdr := &tar.Header{Name: f.Name, Mode: f.Mode, ModTime: mtime, Uid: f.UID, Gid: f.UID}
		switch {
		case strings.HasSuffix(f.Name, "/"):
			hdr.Typeflag = tar.TypeDir
		case f.Link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.Body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Body); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// WithConfig returns img with config as its runtime configuration, for
// linux on this machine's architecture.
func WithConfig(img v1.Image, config v1.Config) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", runtime.GOARCH, config
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes img as `docker save` does, tagged with names, to path.
func WriteArchive(path string, img v1.Image, names ...string) error {
	refs := map[name.Reference]v1.Image{}
	for _, n := range names {
		tag, err := name.NewTag(n)
		if err != nil {
			return err
		}
		refs[tag] = img
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return tarball.MultiRefWriteToFile(path, refs)
}

// StartRegistry starts a registry on 127.0.0.1 for the test's life and
// returns its host:port. With login, every pull must authenticate with it
// (basic auth), as a private registry's.
func StartRegistry(t testing.TB, login *authn.Basic) string {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h := http.Handler(reg)
	if login != nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != login.Username || p != login.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="steadyplane-test"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
			reg.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Push pushes img to ref (host:port/repository:tag of a test registry),
// with login if the registry wants one.
func Push(ref string, img v1.Image, login *authn.Basic) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	auth := authn.Anonymous
	if login != nil {
		auth = login
	}
	if err := remote.Write(r, img, remote.WithAuth(auth)); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	return nil
}

// HostProgram is a program of this machine that a test image holds.
type HostProgram struct {
	// Path is where it is on this machine, ImagePath where it is in the image.
	Path, ImagePath string
	// Package is the Debian package that installs it, for the error when
	// it is missing.
	Package string
}

// HostPrograms returns the entries of a layer that holds programs, with
// the ELF interpreter and shared libraries they load at the paths the
// loader asks for (images.ExecutableFiles), and every directory above
// them: how the tests give an image a real curl or dig where the upstream
// image has Alpine's.
func HostPrograms(programs ...HostProgram) ([]File, error) {
	var files []File
	dirs := map[string]bool{}
	add := func(dst, src string) error {
		for _, d := range images.ParentDirs(dst) {
			if !dirs[d] {
				dirs[d] = true
				files = append(files, File{Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755})
			}
		}
		body, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		files = append(files, File{Name: strings.TrimPrefix(dst, "/"), Mode: 0o755, Body: body})
		return nil
	}
	added := map[string]bool{}
	for _, p := range programs {
		if _, err := os.Stat(p.Path); err != nil {
			return nil, fmt.Errorf("the test images need %s (apt-get install %s): %w", p.Path, p.Package, err)
		}
		libs, err := images.ExecutableFiles(p.Path)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if !added[lib] {
				added[lib] = true
				if err := add(lib, lib); err != nil {
					return nil, err
				}
			}
		}
		if err := add(p.ImagePath, p.Path); err != nil {
			return nil, err
		}
	}
	return files, nil
}
