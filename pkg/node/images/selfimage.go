package images

import (
	"archive/tar"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/binary"
)

// libraryDirs are where the dynamic loader finds libraries by default, for
// this machine's multiarch triplet first (Debian's layout).
func libraryDirs() []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "arm": "arm-linux-gnueabihf", "ppc64le": "powerpc64le-linux-gnu", "s390x": "s390x-linux-gnu", "riscv64": "riscv64-linux-gnu"}[goruntime.GOARCH]
	dirs := []string{}
	if triplet != "" {
		dirs = append(dirs, "/lib/"+triplet, "/usr/lib/"+triplet)
	}
	return append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
}

// ExecutableFiles returns the files the executable at path needs besides
// itself to run in an image of its own: its ELF interpreter and the shared
// libraries it and they load, by the paths the loader asks for. A static
// executable needs none.
func ExecutableFiles(path string) ([]string, error) {
	var files []string
	seen := map[string]bool{}
	queue := []string{path}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		f, err := elf.Open(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s as an ELF executable: %w", p, err)
		}
		for _, prog := range f.Progs {
			if prog.Type != elf.PT_INTERP {
				continue
			}
			b, err := io.ReadAll(prog.Open())
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: reading its interpreter: %w", p, err)
			}
			interp := strings.TrimRight(string(b), "\x00") // NUL-terminated
			if interp != "" && !seen[interp] {
				seen[interp] = true
				files = append(files, interp)
			}
		}
		libs, err := f.ImportedLibraries()
		f.Close()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("%s: its libraries: %w", p, err)
		}
		for _, lib := range libs {
			found := ""
			for _, dir := range libraryDirs() {
				if _, err := os.Stat(filepath.Join(dir, lib)); err == nil {
					found = filepath.Join(dir, lib)
					break
				}
			}
			if found == "" {
				return nil, fmt.Errorf("%s needs %s, found in none of %v", p, lib, libraryDirs())
			}
			if !seen[found] {
				seen[found] = true
				files = append(files, found)
				queue = append(queue, found)
			}
		}
	}
	slices.Sort(files)
	return files, nil
}

// ParentDirs returns the directories above path, outermost first
// ("/usr/lib/x.so" gives "/usr", "/usr/lib"): what an image layer declares
// before the file.
func ParentDirs(path string) []string {
	var parents []string
	for d := filepath.Dir(path); d != "/" && d != "."; d = filepath.Dir(d) {
		parents = append(parents, d)
	}
	slices.Reverse(parents)
	return parents
}

// ExecutableImage returns an image that runs the executable at path as
// binPath: one layer with it and what ExecutableFiles lists, at fixed times
// and in a fixed order, so that the same executable makes the same image
// (the same digest on every node). The layer is written to a file in tmpDir
// (named .layer-*.tmp, which no image import takes).
func ExecutableImage(path, binPath, tmpDir string) (v1.Image, error) {
	files, err := ExecutableFiles(path)
	if err != nil {
		return nil, err
	}
	layerFile, err := os.CreateTemp(tmpDir, ".layer-*.tmp")
	if err != nil {
		return nil, err
	}
	defer layerFile.Close()
	if err := writeExecutableLayer(layerFile, path, binPath, files); err != nil {
		return nil, err
	}
	if err := layerFile.Sync(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromFile(layerFile.Name())
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	diffID, err := layer.DiffID()
	if err != nil {
		return nil, err
	}
	return mutate.ConfigFile(img, executableConfig(diffID, binPath))
}

// writeExecutableLayer writes the layer of ExecutableImage to w as a tar
// stream: the parent directories, files (the executable's libraries), then
// the executable at path as binPath.
func writeExecutableLayer(w io.Writer, path, binPath string, files []string) error {
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	add := func(src, dst string, mode int64) error {
		for _, d := range ParentDirs(dst) {
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Name: d[1:] + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
					return err
				}
			}
		}
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: dst[1:], Typeflag: tar.TypeReg, Mode: mode, Size: st.Size(), ModTime: epoch}); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	}
	for _, lib := range files {
		if err := add(lib, lib, executableMode); err != nil {
			return fmt.Errorf("adding %s to the image: %w", lib, err)
		}
	}
	if err := add(path, binPath, executableMode); err != nil {
		return fmt.Errorf("adding %s to the image: %w", path, err)
	}
	return tw.Close()
}

// executableMode is the mode of the files of an executable's image.
const executableMode = 0o755

// executableConfig is the configuration of the executable's image whose
// one layer is diffID: what mutate.AppendLayers on the empty image and
// then the entrypoint make, field for field, so that ExecutableImage and
// AddExecutable give the same image ID.
func executableConfig(diffID v1.Hash, binPath string) *v1.ConfigFile {
	return &v1.ConfigFile{
		OS: "linux", Architecture: goruntime.GOARCH,
		RootFS:  v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{diffID}},
		History: []v1.History{{}},
		Config:  v1.Config{Entrypoint: []string{binPath}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}},
	}
}

// WriteExecutableArchive writes, as `docker save` does, the image of the
// executable at path (ExecutableImage) tagged ref to archive, atomically,
// unless archive exists already.
func WriteExecutableArchive(path, binPath, ref, archive string) error {
	if _, err := os.Stat(archive); err == nil {
		return nil
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	dir := filepath.Dir(archive)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	img, err := ExecutableImage(path, binPath, dir)
	if err != nil {
		return err
	}
	defer cleanTemp(dir, ".layer-*.tmp")
	tmp := archive + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing the image %s: %w", ref, err)
	}
	if err := os.Rename(tmp, archive); err != nil {
		return err
	}
	return atomicfile.SyncDir(dir)
}

func cleanTemp(dir, pattern string) {
	matches, _ := filepath.Glob(filepath.Join(dir, pattern))
	for _, m := range matches {
		os.Remove(m)
	}
}

// AddExecutable puts the image of the executable at path (ExecutableImage,
// run as binPath) into the store as ref, unless the store has ref already:
// what WriteExecutableArchive and an import of its archive give, without
// the archive, its compression or a layer file in between. When path is on
// the store's filesystem with the image's mode, the layer's copy of it is a
// hard link to path: the processes that run it from the image share its
// pages in memory with those that run path itself (a server's CoreDNS and
// its control plane).
func (s *Store) AddExecutable(path, binPath, ref string, o UnpackOptions) error {
	if _, ok, err := s.Get(ref); err == nil && ok {
		return nil
	}
	_, normalized, err := Normalize(ref)
	if err != nil {
		return err
	}
	files, err := ExecutableFiles(path)
	if err != nil {
		return err
	}
	h := sha256.New()
	size := &countingWriter{w: h}
	if err := writeExecutableLayer(size, path, binPath, files); err != nil {
		return fmt.Errorf("the image %s: %w", ref, err)
	}
	diffID := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	open := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeExecutableLayer(pw, path, binPath, files)) }()
		return pr, nil
	}
	if err := s.unpackLayer(open, diffID, o); err != nil {
		return fmt.Errorf("the image %s: layer %s: %w", ref, diffID, err)
	}
	linkSame(path, filepath.Join(s.layerPath(diffID), binPath))
	raw, err := json.Marshal(executableConfig(diffID, binPath))
	if err != nil {
		return err
	}
	if _, err := s.register(raw, []v1.Hash{diffID}, size.n, []string{normalized}, nil); err != nil {
		return fmt.Errorf("the image %s: %w", ref, err)
	}
	return nil
}

// linkSame replaces copy, a file with the content of src, by a hard link to
// src when both are on one filesystem and have the same mode; it leaves the
// copy as it is otherwise.
func linkSame(src, copy string) {
	a, errA := os.Stat(src)
	b, errB := os.Stat(copy)
	if errA != nil || errB != nil || a.Mode() != b.Mode() || a.Size() != b.Size() || os.SameFile(a, b) {
		return
	}
	tmp := copy + ".link"
	_ = os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		return
	}
	if err := os.Rename(tmp, copy); err != nil {
		_ = os.Remove(tmp)
	}
}

// countingWriter counts what goes through it to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// AddBinary puts the image of steadyplane's installed binary (one layer
// with it as binary.ImagePath and the libraries it loads) into the store
// as binary.ImageRef(installed), unless the store has it, and returns that
// name. Pods run it with imagePullPolicy Never: every node adds the image
// of its own binary, and nodes of one build name the same image.
func (s *Store) AddBinary(installed string, o UnpackOptions) (string, error) {
	ref := binary.ImageRef(installed)
	return ref, s.AddExecutable(installed, binary.ImagePath, ref, o)
}
