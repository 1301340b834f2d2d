package images

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestExecutableFiles(t *testing.T) {
	ls, err := exec.LookPath("ls")
	if err != nil {
		t.Fatalf("ls (coreutils), the dynamic executable the test reads, is not on this machine: %v", err)
	}
	files, err := ExecutableFiles(ls)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(f, "/libc.so.6") }) ||
		!slices.ContainsFunc(files, func(f string) bool { return strings.Contains(f, "ld-linux") }) {
		t.Errorf("ls needs %v; want libc and the loader among them", files)
	}
	static := filepath.Join(t.TempDir(), "static")
	build := exec.Command("go", "build", "-o", static, "./testdata/static")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a static program: %v\n%s", err, out)
	}
	if files, err := ExecutableFiles(static); err != nil || len(files) != 0 {
		t.Errorf("a static executable needs %v, %v; want nothing", files, err)
	}
	if _, err := ExecutableFiles("/etc/hostname"); err == nil {
		t.Error("a file that is no executable: want an error")
	}
}

// TestExecutableArchive: the same executable makes the same image, with the
// executable where asked and its libraries where the loader looks.
func TestExecutableArchive(t *testing.T) {
	ls, err := exec.LookPath("ls")
	if err != nil {
		t.Fatalf("ls (coreutils), the dynamic executable the test reads, is not on this machine: %v", err)
	}
	dir := t.TempDir()
	var digests []string
	for _, sub := range []string{"a", "b"} {
		archive := filepath.Join(dir, sub, "ls.tar")
		if err := WriteExecutableArchive(ls, "/usr/local/bin/ls", "steadyplane.io/ls:1", archive); err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(archive, nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d.String())
		if left, _ := filepath.Glob(filepath.Join(dir, sub, ".layer-*")); len(left) != 0 {
			t.Errorf("temporary layers left: %v", left)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("layers %v, %v; want one", layers, err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, h.Name)
		}
		rc.Close()
		if !slices.Contains(names, "usr/local/bin/ls") || !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, "/libc.so.6") }) {
			t.Errorf("layer files %v; want usr/local/bin/ls and libc", names)
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("the same executable made two images: %v", digests)
	}
}

// TestAddExecutable: the image goes into the store under its name, the
// same image an import of WriteExecutableArchive's archive gives, and
// adding it again does nothing.
func TestAddExecutable(t *testing.T) {
	ls, err := exec.LookPath("ls")
	if err != nil {
		t.Fatalf("ls (coreutils), the dynamic executable the test reads, is not on this machine: %v", err)
	}
	const ref = "steadyplane.io/ls:1"
	rootless := UnpackOptions{Rootless: os.Geteuid() != 0}
	direct, err := Open(filepath.Join(t.TempDir(), "direct"))
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.AddExecutable(ls, "/usr/local/bin/ls", ref, rootless); err != nil {
		t.Fatal(err)
	}
	added, ok, err := direct.Get(ref)
	if err != nil || !ok {
		t.Fatalf("%s after AddExecutable: %v, %v", ref, ok, err)
	}
	if left, _ := filepath.Glob(filepath.Join(direct.root, ".layer-*")); len(left) != 0 {
		t.Errorf("temporary layers left: %v", left)
	}
	if err := direct.AddExecutable("/nonexistent", "/usr/local/bin/ls", ref, rootless); err != nil {
		t.Errorf("adding a name the store has: %v; want nothing done", err)
	}
	imported, err := Open(filepath.Join(t.TempDir(), "imported"))
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "ls.tar")
	if err := WriteExecutableArchive(ls, "/usr/local/bin/ls", ref, archive); err != nil {
		t.Fatal(err)
	}
	if _, err := imported.Import(archive, rootless); err != nil {
		t.Fatal(err)
	}
	if viaArchive, _, err := imported.Get(ref); err != nil || viaArchive.ID != added.ID {
		t.Errorf("the image added directly is %s, through an archive %s (%v); want the same", added.ID, viaArchive.ID, err)
	}
}

func TestParentDirs(t *testing.T) {
	for path, want := range map[string][]string{
		"/usr/lib/x86_64-linux-gnu/libc.so.6": {"/usr", "/usr/lib", "/usr/lib/x86_64-linux-gnu"},
		"/agnhost":                            nil,
		"usr/bin/curl":                        {"usr", "usr/bin"},
	} {
		if got := ParentDirs(path); !slices.Equal(got, want) {
			t.Errorf("ParentDirs(%q) = %q, want %q", path, got, want)
		}
	}
}
