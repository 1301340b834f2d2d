package images

import (
	"archive/tar"
	"debug/elf"
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
	tw := tar.NewWriter(layerFile)
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
		if err := add(lib, lib, 0o755); err != nil {
			return nil, fmt.Errorf("adding %s to the image: %w", lib, err)
		}
	}
	if err := add(path, binPath, 0o755); err != nil {
		return nil, fmt.Errorf("adding %s to the image: %w", path, err)
	}
	if err := tw.Close(); err != nil {
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
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	cf.Config = v1.Config{Entrypoint: []string{binPath}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}
	return mutate.ConfigFile(img, cf)
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
// what WriteExecutableArchive and an import of its archive do, without the
// archive in between (a node that has no agent to import it at start).
func (s *Store) AddExecutable(path, binPath, ref string, o UnpackOptions) error {
	if _, ok, err := s.Get(ref); err == nil && ok {
		return nil
	}
	_, normalized, err := Normalize(ref)
	if err != nil {
		return err
	}
	img, err := ExecutableImage(path, binPath, s.root)
	if err != nil {
		return err
	}
	defer cleanTemp(s.root, ".layer-*.tmp")
	if _, err := s.Add(img, []string{normalized}, nil, o); err != nil {
		return fmt.Errorf("the image %s: %w", ref, err)
	}
	return nil
}
