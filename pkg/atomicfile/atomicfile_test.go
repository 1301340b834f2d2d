package atomicfile

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileCreatesAndReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret.key")
	if err := WriteFile(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || string(got) != "two" {
		t.Fatalf("content %q, %v", got, err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temporaries left)", len(entries))
	}
}

func TestWriteFileMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ca.crt")
	if err := WriteFile(p, []byte("cert"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
}

func TestWriteFileFailureLeavesOldContent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A path whose directory does not exist cannot be written; the error names it.
	missing := filepath.Join(dir, "nope", "f")
	if err := WriteFile(missing, []byte("x"), 0o600); err == nil {
		t.Fatal("want an error for a missing directory")
	}
	// Renaming onto a directory fails after the temporary file was written:
	// the temporary must be cleaned up and nothing else touched.
	sub := filepath.Join(dir, "isdir")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(sub, []byte("x"), 0o600); err == nil {
		t.Fatal("want an error when the target is a non-empty directory")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("left %v, want only f and isdir", names)
	}
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Errorf("old file changed to %q", got)
	}
}

// TestCrashAtEachStep kills the write (no cleanup runs, as when the process
// dies) after each of its steps: the file holds the old content or the new
// one, never part of either, and the next write succeeds.
func TestCrashAtEachStep(t *testing.T) {
	old := []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: kube-apiserver, annotations: {steadyplane.io/revision: \"1\"}}\n")
	updated := []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: kube-apiserver, annotations: {steadyplane.io/revision: \"2\"}}\nspec: {}\n")
	for _, step := range []string{"create", "half written", "synced", "renamed"} {
		t.Run(step, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "kube-apiserver.yaml")
			if err := WriteFile(p, old, 0o600); err != nil {
				t.Fatal(err)
			}
			err := writeFile(p, bytes.NewReader(updated), 0o600, func(s string) bool { return s == step })
			if err != errCrashed {
				t.Fatalf("the write did not crash at %q: %v", step, err)
			}
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			wantNew := step == "renamed"
			if (wantNew && string(got) != string(updated)) || (!wantNew && string(got) != string(old)) {
				t.Fatalf("after a crash at %q the file holds %q", step, got)
			}
			if err := WriteFile(p, updated, 0o600); err != nil {
				t.Fatalf("writing after the crash: %v", err)
			}
			if got, _ := os.ReadFile(p); string(got) != string(updated) {
				t.Fatalf("after the next write: %q", got)
			}
		})
	}
}

func TestSymlinkReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "last-known-good")
	for _, target := range []string{"kube-apiserver-pod-1", "kube-apiserver-pod-2"} {
		if err := Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if got, err := os.Readlink(link); err != nil || got != target {
			t.Fatalf("link points to %q (%v), want %q", got, err, target)
		}
	}
	// Dying between making the new link and renaming it leaves the old one.
	if err := symlink("kube-apiserver-pod-3", link, func(string) bool { return true }); err != errCrashed {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(link); got != "kube-apiserver-pod-2" {
		t.Fatalf("after a crash the link points to %q", got)
	}
	if err := Symlink("kube-apiserver-pod-3", link); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(link); got != "kube-apiserver-pod-3" {
		t.Fatalf("link points to %q", got)
	}
}
