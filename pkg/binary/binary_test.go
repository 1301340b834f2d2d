package binary

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestInstall(t *testing.T) {
	src := filepath.Join(t.TempDir(), "steadyplane")
	dir := filepath.Join(t.TempDir(), "bin")
	write := func(content string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(src, []byte(content), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(src, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Unix(1700000000, 0)
	write("#!/bin/sh\necho one\n", t0)
	first, err := Install(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(first), Prefix) || len(filepath.Base(first)) != len(Prefix)+12 {
		t.Errorf("installed as %s, want %s<12 hex digits>", first, Prefix)
	}
	if st, err := os.Stat(first); err != nil || st.Mode().Perm() != Mode {
		t.Fatalf("installed copy: %v, mode %v; want %v", err, st.Mode().Perm(), Mode)
	}
	again, err := Install(src, dir)
	if err != nil || again != first {
		t.Fatalf("the same source again: %s, %v; want %s", again, err, first)
	}

	// A rebuilt binary (new content, new modification time) gets a new
	// name, and the old copy stays for the pods that still name it.
	write("#!/bin/sh\necho two\n", t0.Add(time.Minute))
	second, err := Install(src, dir)
	if err != nil || second == first {
		t.Fatalf("a rebuilt binary: %s, %v; want a new name", second, err)
	}
	if _, err := os.Stat(first); err != nil {
		t.Errorf("the first copy went: %v", err)
	}

	// The record is only a shortcut: a damaged one costs a hash.
	if err := os.WriteFile(filepath.Join(dir, recordFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := Install(src, dir); err != nil || got != second {
		t.Errorf("with a damaged record: %s, %v; want %s", got, err, second)
	}

	// A copy an earlier release installed 0700 is made shareable.
	if err := os.Chmod(second, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(src, dir); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(second); st.Mode().Perm() != Mode {
		t.Errorf("a 0700 copy stays %v, want %v", st.Mode().Perm(), Mode)
	}

	if _, err := Install(filepath.Join(t.TempDir(), "missing"), dir); err == nil {
		t.Error("installing a missing file: no error")
	}
}

func TestImageRef(t *testing.T) {
	if got := ImageRef("/d/bin/steadyplane-12d5cd6e12f2"); got != "steadyplane.io/steadyplane:12d5cd6e12f2" {
		t.Errorf("ImageRef = %s", got)
	}
}

func TestFindByDigest(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "steadyplane")
	if err := os.WriteFile(src, []byte("a release"), 0o700); err != nil {
		t.Fatal(err)
	}
	installed, err := Install(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := Digest(src)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Find(dir, digest); err != nil || got != installed {
		t.Fatalf("Find(%s) = %q, %v; want %q", digest, got, err, installed)
	}
	other := "sha256:" + strings.Repeat("0", 64)
	if _, err := Find(dir, other); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Find of a digest not installed: %v, want not-exist", err)
	}
	// A copy whose name matches but whose content does not is not served.
	same := digest[:len("sha256:")+12] + strings.Repeat("0", 52)
	if _, err := Find(dir, same); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Find of a digest sharing the name's 12 digits: %v, want not-exist", err)
	}
	for _, bad := range []string{"", "sha256:", "sha256:XYZ", "md5:" + strings.Repeat("0", 64), "sha256:" + strings.Repeat("A", 64), "sha256:../../etc/passwd"} {
		if _, err := Find(dir, bad); err == nil || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Find(%q) = %v, want a clear refusal", bad, err)
		}
	}
}
