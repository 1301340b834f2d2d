// Package images is the node agent's image store, as a CRI runtime keeps
// one: images pulled from registries or imported from archives, each layer
// unpacked once into a directory overlayfs stacks (shared by every image and
// container that has it), the images' configurations, and the names that
// point at them.
//
// On disk, under the store's root:
//
//	images.json         the images: names, repository digests, layers (atomic)
//	configs/<hex>.json  each image's configuration, by its digest (the image ID)
//	layers/<hex>/       each layer unpacked, by its uncompressed digest (diff ID)
//	leases/<id>         the layers a container's root filesystem stacks
//	lock                serializes changes between processes (flock)
package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

// Image is one image in the store.
type Image struct {
	// ID is the digest of the image's configuration ("sha256:…"), as
	// ContainerStatus.ImageID shows it.
	ID string `json:"id"`
	// Names are the references that name it, normalized
	// ("docker.io/library/nginx:latest").
	Names []string `json:"names,omitempty"`
	// RepoDigests are its manifests' digests by repository
	// ("docker.io/library/nginx@sha256:…").
	RepoDigests []string `json:"repoDigests,omitempty"`
	// Layers are the diff IDs of its layers, bottom first.
	Layers []string `json:"layers"`
	// Size is the bytes of its unpacked layers' files.
	Size int64 `json:"size"`
	// Created is when the store got it; LastUsed when a container last
	// started from it (image garbage collection removes the least recent).
	Created  time.Time `json:"created"`
	LastUsed time.Time `json:"lastUsed,omitempty"`
}

// Store is an image store in a directory. Its methods are safe for
// concurrent use, also by several processes.
type Store struct {
	root string
	mu   sync.Mutex // within the process; the lock file across processes
	now  func() time.Time
}

type index struct {
	Images []Image `json:"images"`
}

// Open opens the store in root, creating it if needed (0700: image
// configurations may name credentials' hosts and internal layouts).
func Open(root string) (*Store, error) {
	for _, d := range []string{root, filepath.Join(root, "configs"), filepath.Join(root, "layers"), filepath.Join(root, "leases"), filepath.Join(root, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	// A pull's lease outlives it only when its process died: one older
	// than any pull takes holds its layers for nothing.
	leases, _ := os.ReadDir(filepath.Join(root, "leases"))
	for _, e := range leases {
		if fi, err := e.Info(); err == nil && strings.HasPrefix(e.Name(), "pull-") && time.Since(fi.ModTime()) > staleLease {
			_ = os.Remove(filepath.Join(root, "leases", e.Name()))
		}
	}
	return &Store{root: root, now: time.Now}, nil
}

// staleLease is the age past which a pull's lease is a dead process's.
const staleLease = 6 * time.Hour

// Root is the store's directory.
func (s *Store) Root() string { return s.root }

// Normalize returns ref as the store names it: with a registry
// ("docker.io" for none), "library/" for Docker Hub's official images, and
// ":latest" when it has neither tag nor digest. It fails for a reference
// that is not valid (the kubelet's InvalidImageName).
func Normalize(ref string) (name.Reference, string, error) {
	r, err := name.ParseReference(ref, name.WithDefaultRegistry(name.DefaultRegistry))
	if err != nil {
		return nil, "", err
	}
	return r, displayName(r), nil
}

// displayName writes Docker Hub as "docker.io", as containerd and the
// kubelet show it, where the library says "index.docker.io".
func displayName(r name.Reference) string {
	s := r.Name()
	if rest, ok := strings.CutPrefix(s, name.DefaultRegistry+"/"); ok {
		return "docker.io/" + rest
	}
	return s
}

// repoDigest is the repository of r with digest d.
func repoDigest(r name.Reference, d v1.Hash) string {
	return displayName(r.Context().Digest(d.String()))
}

// Get returns the image ref names (a tag or a digest), or false.
func (s *Store) Get(ref string) (Image, bool, error) {
	_, n, err := Normalize(ref)
	if err != nil {
		return Image{}, false, err
	}
	idx, err := s.read()
	if err != nil {
		return Image{}, false, err
	}
	if img, ok := idx.find(n); ok {
		return img, true, nil
	}
	// An image ID ("sha256:…") names the image too, as crictl accepts.
	for _, img := range idx.Images {
		if img.ID == ref {
			return img, true, nil
		}
	}
	return Image{}, false, nil
}

func (x *index) find(n string) (Image, bool) {
	for _, img := range x.Images {
		if slices.Contains(img.Names, n) || slices.Contains(img.RepoDigests, n) {
			return img, true
		}
	}
	return Image{}, false
}

// List returns every image, by first name.
func (s *Store) List() ([]Image, error) {
	idx, err := s.read()
	if err != nil {
		return nil, err
	}
	return idx.Images, nil
}

// Config returns the configuration of image id.
func (s *Store) Config(id string) (*v1.ConfigFile, error) {
	h, err := v1.NewHash(id)
	if err != nil {
		return nil, fmt.Errorf("image id %q: %w", id, err)
	}
	b, err := os.ReadFile(s.configPath(h))
	if err != nil {
		return nil, fmt.Errorf("configuration of image %s: %w", id, err)
	}
	var cf v1.ConfigFile
	if err := json.Unmarshal(b, &cf); err != nil {
		return nil, fmt.Errorf("configuration of image %s: %w", id, err)
	}
	return &cf, nil
}

// LayerDirs returns the unpacked directories of img's layers, top first,
// as overlayfs's lowerdir lists them.
func (s *Store) LayerDirs(img Image) ([]string, error) {
	dirs := make([]string, 0, len(img.Layers))
	for i := len(img.Layers) - 1; i >= 0; i-- {
		h, err := v1.NewHash(img.Layers[i])
		if err != nil {
			return nil, err
		}
		d := s.layerPath(h)
		if _, err := os.Stat(d); err != nil {
			return nil, fmt.Errorf("layer %s of image %s: %w", img.Layers[i], img.ID, err)
		}
		dirs = append(dirs, d)
	}
	return dirs, nil
}

// Remove removes the image ref names. A name removes only itself while
// other names remain on the image; the last name, a digest or the image ID
// removes the image. Layers no other image or container uses are deleted.
func (s *Store) Remove(ref string) (Image, error) {
	var removed Image
	err := s.update(func(idx *index) error {
		_, n, nerr := Normalize(ref)
		for i, img := range idx.Images {
			named := nerr == nil && (slices.Contains(img.Names, n) || slices.Contains(img.RepoDigests, n))
			if !named && img.ID != ref {
				continue
			}
			removed = img
			if named && slices.Contains(img.Names, n) && len(img.Names) > 1 {
				idx.Images[i].Names = slices.DeleteFunc(slices.Clone(img.Names), func(x string) bool { return x == n })
				return nil
			}
			idx.Images = slices.Delete(idx.Images, i, i+1)
			return nil
		}
		return fmt.Errorf("image %q is not in the store (%w)", ref, os.ErrNotExist)
	})
	if err != nil {
		return Image{}, err
	}
	return removed, s.Prune()
}

// Prune deletes layers and configurations that no image names and no
// container leases.
func (s *Store) Prune() error {
	return s.locked(func() error {
		idx, err := s.read()
		if err != nil {
			return err
		}
		keepLayers, keepConfigs := map[string]bool{}, map[string]bool{}
		for _, img := range idx.Images {
			keepConfigs[strings.TrimPrefix(img.ID, "sha256:")] = true
			for _, l := range img.Layers {
				keepLayers[strings.TrimPrefix(l, "sha256:")] = true
			}
		}
		for _, l := range s.leases() {
			for _, layer := range l.Layers {
				keepLayers[strings.TrimPrefix(layer, "sha256:")] = true
			}
		}
		var errs []error
		entries, _ := os.ReadDir(filepath.Join(s.root, "layers"))
		for _, e := range entries {
			if !keepLayers[e.Name()] {
				errs = append(errs, os.RemoveAll(filepath.Join(s.root, "layers", e.Name())))
			}
		}
		configs, _ := os.ReadDir(filepath.Join(s.root, "configs"))
		for _, e := range configs {
			if !keepConfigs[strings.TrimSuffix(e.Name(), ".json")] {
				errs = append(errs, os.Remove(filepath.Join(s.root, "configs", e.Name())))
			}
		}
		return errors.Join(errs...)
	})
}

// lease is what a container's lease file holds.
type lease struct {
	Image  string   `json:"image"`
	Layers []string `json:"layers"`
}

// Lease records that container id's root filesystem stacks img's layers,
// so that removing img keeps them until Release, and image garbage
// collection leaves img alone.
func (s *Store) Lease(id string, img Image) error {
	b, err := json.Marshal(lease{Image: img.ID, Layers: img.Layers})
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(s.leasePath(id), b, 0o600)
}

// leases returns every container's lease.
func (s *Store) leases() []lease {
	entries, _ := os.ReadDir(filepath.Join(s.root, "leases"))
	var out []lease
	for _, e := range entries {
		var l lease
		if b, err := os.ReadFile(filepath.Join(s.root, "leases", e.Name())); err == nil && json.Unmarshal(b, &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// InUse returns the IDs of the images containers run from.
func (s *Store) InUse() map[string]bool {
	out := map[string]bool{}
	for _, l := range s.leases() {
		out[l.Image] = true
	}
	return out
}

// Release ends container id's lease.
func (s *Store) Release(id string) error {
	if err := os.Remove(s.leasePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Used records that a container started from image id now.
func (s *Store) Used(id string) error {
	return s.update(func(idx *index) error {
		for i := range idx.Images {
			if idx.Images[i].ID == id {
				idx.Images[i].LastUsed = s.now().UTC()
			}
		}
		return nil
	})
}

func (s *Store) leasePath(id string) string {
	return filepath.Join(s.root, "leases", strings.ReplaceAll(id, "/", "_"))
}

func (s *Store) configPath(h v1.Hash) string {
	return filepath.Join(s.root, "configs", h.Hex+".json")
}

func (s *Store) layerPath(h v1.Hash) string { return filepath.Join(s.root, "layers", h.Hex) }

func (s *Store) read() (*index, error) {
	b, err := os.ReadFile(filepath.Join(s.root, "images.json"))
	if errors.Is(err, os.ErrNotExist) {
		return &index{}, nil
	}
	if err != nil {
		return nil, err
	}
	var idx index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("image store %s: images.json: %w", s.root, err)
	}
	return &idx, nil
}

// update changes the index under the lock and writes it atomically.
func (s *Store) update(change func(*index) error) error {
	return s.locked(func() error {
		idx, err := s.read()
		if err != nil {
			return err
		}
		if err := change(idx); err != nil {
			return err
		}
		sort.SliceStable(idx.Images, func(i, j int) bool { return firstName(idx.Images[i]) < firstName(idx.Images[j]) })
		b, err := json.MarshalIndent(idx, "", "  ")
		if err != nil {
			return err
		}
		return atomicfile.WriteFile(filepath.Join(s.root, "images.json"), b, 0o600)
	})
}

func firstName(img Image) string {
	if len(img.Names) > 0 {
		return img.Names[0]
	}
	if len(img.RepoDigests) > 0 {
		return img.RepoDigests[0]
	}
	return img.ID
}

// locked runs f holding the store's lock, in this process and across
// processes (the node agent and `steadyplane images`).
func (s *Store) locked(f func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	lf, err := os.OpenFile(filepath.Join(s.root, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("locking the image store: %w", err)
	}
	defer func() { _ = unix.Flock(int(lf.Fd()), unix.LOCK_UN) }()
	return f()
}

// ReadFile reads the file at p (absolute, in the image) from layers (top
// first) as overlayfs shows it: from the topmost layer that has it, unless
// a whiteout or an opaque parent in a layer above hides it. A symbolic link
// is not followed: the image's passwd and group files are read this way,
// and a link out of the image must not reach the host's.
func ReadFile(layers []string, p string) ([]byte, error) {
	rel := filepath.Clean("/" + p)
	for _, l := range layers {
		full := filepath.Join(l, rel)
		var st unix.Stat_t
		err := unix.Lstat(full, &st)
		switch {
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0:
			return nil, fmt.Errorf("%s: %w", p, os.ErrNotExist) // a whiteout
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG:
			return os.ReadFile(full)
		case err == nil:
			return nil, fmt.Errorf("%s is not a regular file in the image", p)
		}
		buf := make([]byte, 1)
		if n, err := unix.Lgetxattr(filepath.Join(l, filepath.Dir(rel)), overlayOpaque, buf); err == nil && n == 1 && buf[0] == 'y' {
			break // an opaque directory hides the layers below
		}
	}
	return nil, fmt.Errorf("%s: %w", p, os.ErrNotExist)
}

// StoreDir is where the node agent with root directory rootDir keeps its
// image store.
func StoreDir(rootDir string) string { return filepath.Join(rootDir, "image-store") }

// ImportDir imports every image archive in dir (*.tar, *.tar.gz, *.tgz) into
// the store, as k3s imports its agent/images at start: an archive that
// cannot be imported is reported through failed and skipped, never fatal.
// It returns the images imported.
func (s *Store) ImportDir(dir string, o UnpackOptions, failed func(path string, err error)) ([]Image, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || !(strings.HasSuffix(n, ".tar") || strings.HasSuffix(n, ".tar.gz") || strings.HasSuffix(n, ".tgz")) {
			continue
		}
		imgs, err := s.Import(filepath.Join(dir, n), o)
		if err != nil {
			failed(filepath.Join(dir, n), err)
			continue
		}
		out = append(out, imgs...)
	}
	return out, nil
}
