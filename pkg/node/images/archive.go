package images

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Annotations that name an image in an OCI archive: containerd's export
// writes the whole reference in the first, the image spec a tag (or, with
// some tools, a whole reference) in the second.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// Import adds the images of an archive to the store: `docker save` output
// or an OCI image layout in a tar (`podman save --format oci-archive`,
// `ctr export`, crane), either gzip-compressed or not. It returns the
// images it added, with the names the archive gave them.
func (s *Store) Import(path string, o UnpackOptions) ([]Image, error) {
	plain, cleanup, err := s.uncompressed(path)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	isOCI, err := tarHas(plain, "oci-layout")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var imgs []Image
	if isOCI {
		imgs, err = s.importOCI(plain, o)
	} else {
		imgs, err = s.importDocker(plain, o)
	}
	if err != nil {
		return imgs, fmt.Errorf("%s: %w", path, err)
	}
	return imgs, nil
}

// uncompressed returns path, or a temporary uncompressed copy of it when it
// is gzip-compressed (the tar readers need to open it more than once).
func (s *Store) uncompressed(path string) (string, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	magic, _ := br.Peek(2)
	if len(magic) < 2 || magic[0] != 0x1f || magic[1] != 0x8b {
		return path, func() {}, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Join(s.root, "tmp"), "import-*.tar")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.Remove(tmp.Name()) }
	_, err = io.Copy(tmp, zr)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	return tmp.Name(), cleanup, nil
}

func tarHas(path, entry string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	found := false
	err = walkTar(f, func(n string) bool {
		found = strings.TrimPrefix(n, "./") == entry
		return !found
	})
	return found, err
}

func (s *Store) importDocker(path string, o UnpackOptions) ([]Image, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(path) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("neither an OCI archive nor `docker save` output: %w", err)
	}
	var out []Image
	for i, d := range m {
		var tag *name.Tag
		var names []string
		for _, t := range d.RepoTags {
			nt, err := name.NewTag(t, name.WithDefaultRegistry(name.DefaultRegistry))
			if err != nil {
				return out, fmt.Errorf("image %d: tag %q: %w", i, t, err)
			}
			if tag == nil {
				tag = &nt
			}
			names = append(names, displayName(nt))
		}
		if tag == nil && len(m) > 1 {
			return out, fmt.Errorf("image %d has no tag, and an untagged image can only be read from an archive of one", i)
		}
		img, err := tarball.Image(opener, tag)
		if err != nil {
			return out, fmt.Errorf("image %d: %w", i, err)
		}
		added, err := s.Add(img, names, nil, o)
		if err != nil {
			return out, fmt.Errorf("image %d: %w", i, err)
		}
		out = append(out, added)
	}
	return out, nil
}

func (s *Store) importOCI(path string, o UnpackOptions) ([]Image, error) {
	dir, err := os.MkdirTemp(filepath.Join(s.root, "tmp"), "oci-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	_, err = Unpack(dir, f, UnpackOptions{Rootless: true})
	f.Close()
	if err != nil {
		return nil, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, desc := range im.Manifests {
		var names []string
		if n := archiveName(desc.Annotations); n != "" {
			names = []string{n}
		}
		img, err := imageForPlatform(idx, desc)
		if err != nil {
			return out, fmt.Errorf("manifest %s: %w", desc.Digest, err)
		}
		added, err := s.Add(img, names, nil, o)
		if err != nil {
			return out, fmt.Errorf("manifest %s: %w", desc.Digest, err)
		}
		out = append(out, added)
	}
	return out, nil
}

// archiveName is the normalized reference an OCI archive's annotations
// give an image, or "" when they give only a tag or nothing.
func archiveName(a map[string]string) string {
	for _, k := range []string{annotationContainerdName, annotationRefName} {
		v := a[k]
		if v == "" || !strings.ContainsAny(v, "/:@") {
			continue // a bare tag names no repository
		}
		if _, n, err := Normalize(v); err == nil {
			return n
		}
	}
	return ""
}

// imageForPlatform returns the image desc names, picking this machine's
// platform from a multi-platform index.
func imageForPlatform(idx v1.ImageIndex, desc v1.Descriptor) (v1.Image, error) {
	if !desc.MediaType.IsIndex() {
		return idx.Image(desc.Digest)
	}
	child, err := idx.ImageIndex(desc.Digest)
	if err != nil {
		return nil, err
	}
	cm, err := child.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range cm.Manifests {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == goruntime.GOARCH {
			return child.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for linux/%s in the index", goruntime.GOARCH)
}

// walkTar calls f with each entry's name until f returns false.
func walkTar(r io.Reader, f func(name string) bool) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !f(hdr.Name) {
			return nil
		}
	}
}
