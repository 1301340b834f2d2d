package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/steadyplane/steadyplane/internal/testci"
)

// entry is one tar entry of a test layer.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
	uid, gid         int
}

func layerTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ, mode := e.typ, e.mode
		if typ == 0 {
			typ = tar.TypeReg
		}
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Linkname: e.link, Uid: e.uid, Gid: e.gid,
			ModTime: time.Unix(1700000000, 0)}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// unpackBeside unpacks entries into a directory with a sibling that a
// layer must never reach, and fails the test if it was reached.
func unpackBeside(t *testing.T, o UnpackOptions, entries ...entry) (string, error) {
	t.Helper()
	base := t.TempDir()
	dir, outside := filepath.Join(base, "layer"), filepath.Join(base, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Unpack(dir, bytes.NewReader(layerTar(t, entries...)), o)
	t.Cleanup(func() {
		got, _ := os.ReadDir(outside)
		b, _ := os.ReadFile(filepath.Join(outside, "secret"))
		if len(got) != 1 || string(b) != "host" {
			t.Errorf("the layer reached outside its directory: %v, secret %q", got, b)
		}
	})
	return dir, err
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reading %s: %v", p, err)
	}
	return string(b)
}

// TestUnpackConfines: every path a layer names stays inside the layer's
// directory (the class of CVE-2018-15664 and of tar "..": the host's files
// are never written or followed).
func TestUnpackConfines(t *testing.T) {
	rootless := UnpackOptions{Rootless: true}
	tests := []struct {
		name    string
		entries []entry
		want    map[string]string // path in the layer -> content
		wantErr bool
	}{
		{name: "dot-dot is cleaned into the layer",
			entries: []entry{{name: "../../outside/secret", body: "layer"}},
			want:    map[string]string{"outside/secret": "layer"}},
		{name: "an absolute name is inside the layer",
			entries: []entry{{name: "/etc/passwd", body: "root:x:0:0::/root:/bin/sh\n"}},
			want:    map[string]string{"etc/passwd": "root:x:0:0::/root:/bin/sh\n"}},
		{name: "a file through a symlinked parent lands inside the layer",
			entries: []entry{{name: "up", typ: tar.TypeSymlink, link: "../outside"}, {name: "up/secret", body: "layer"}},
			want:    map[string]string{"outside/secret": "layer"}},
		{name: "a file through an absolute symlink lands inside the layer",
			entries: []entry{{name: "root", typ: tar.TypeSymlink, link: "/"}, {name: "root/outside/secret", body: "layer"}},
			want:    map[string]string{"outside/secret": "layer"}},
		{name: "a file over a symlink replaces the link, not its target",
			entries: []entry{{name: "s", typ: tar.TypeSymlink, link: "../outside/secret"}, {name: "s", body: "layer"}},
			want:    map[string]string{"s": "layer"}},
		{name: "a hard link out of the layer is refused",
			entries: []entry{{name: "h", typ: tar.TypeLink, link: "../outside/secret"}},
			wantErr: true},
		{name: "a hard link to a file of the layer is made",
			entries: []entry{{name: "a", body: "x"}, {name: "b", typ: tar.TypeLink, link: "a"}},
			want:    map[string]string{"a": "x", "b": "x"}},
		{name: "a file before its directory",
			entries: []entry{{name: "usr/bin/tool", body: "#!"}, {name: "usr/bin", typ: tar.TypeDir}},
			want:    map[string]string{"usr/bin/tool": "#!"}},
		{name: "a later entry replaces an earlier one",
			entries: []entry{{name: "f", body: "one"}, {name: "f", body: "two"}},
			want:    map[string]string{"f": "two"}},
		{name: "a file under a file is refused",
			entries: []entry{{name: "f", body: "one"}, {name: "f/g", body: "two"}},
			wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := unpackBeside(t, rootless, tc.entries...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Unpack: %v, want error %v", err, tc.wantErr)
			}
			for p, want := range tc.want {
				if got := readFile(t, filepath.Join(dir, p)); got != want {
					t.Errorf("%s = %q, want %q", p, got, want)
				}
			}
		})
	}
}

func TestUnpackModesAndLinks(t *testing.T) {
	dir, err := unpackBeside(t, UnpackOptions{Rootless: true},
		entry{name: "bin", typ: tar.TypeDir, mode: 0o755},
		entry{name: "bin/tool", body: "x", mode: 0o4755},
		entry{name: "tmp", typ: tar.TypeDir, mode: 0o1777},
		entry{name: "lib", typ: tar.TypeSymlink, link: "usr/lib"},
	)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "bin/tool"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSetuid == 0 || st.Mode().Perm() != 0o755 {
		t.Errorf("bin/tool mode %v, want setuid 0755", st.Mode())
	}
	if st.ModTime().Unix() != 1700000000 {
		t.Errorf("bin/tool mtime %v, want the entry's", st.ModTime())
	}
	if st, _ := os.Stat(filepath.Join(dir, "tmp")); st == nil || st.Mode()&os.ModeSticky == 0 {
		t.Errorf("tmp is not sticky: %v", st)
	}
	if target, err := os.Readlink(filepath.Join(dir, "lib")); err != nil || target != "usr/lib" {
		t.Errorf("lib -> %q (%v), want usr/lib", target, err)
	}
}

// TestUnpackWhiteouts: deletions and opaque directories in overlayfs's
// form, and owners as the layer gives them (root only).
func TestUnpackWhiteouts(t *testing.T) {
	if os.Geteuid() != 0 {
		testci.CannotRun(t, "whiteouts are device nodes and trusted xattrs: needs root")
	}
	dir, err := unpackBeside(t, UnpackOptions{},
		entry{name: "etc", typ: tar.TypeDir},
		entry{name: "etc/.wh.motd"},
		entry{name: "var/cache", typ: tar.TypeDir},
		entry{name: "var/cache/.wh..wh..opq"},
		entry{name: "home/user/file", body: "mine", uid: 1000, gid: 1001},
	)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "etc/motd"), &st); err != nil {
		t.Fatalf("whiteout: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("etc/motd mode %o rdev %d, want a 0/0 character device", st.Mode, st.Rdev)
	}
	if _, err := os.Lstat(filepath.Join(dir, "etc/.wh.motd")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the whiteout entry itself was written: %v", err)
	}
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(filepath.Join(dir, "var/cache"), overlayOpaque, buf)
	if err != nil || string(buf[:n]) != "y" {
		t.Errorf("var/cache opaque xattr = %q (%v), want y", buf[:n], err)
	}
	if err := unix.Lstat(filepath.Join(dir, "home/user/file"), &st); err != nil || st.Uid != 1000 || st.Gid != 1001 {
		t.Errorf("home/user/file owner %d:%d (%v), want 1000:1001", st.Uid, st.Gid, err)
	}
}

func TestUnpackRootlessRefusesWhiteouts(t *testing.T) {
	if _, err := unpackBeside(t, UnpackOptions{Rootless: true}, entry{name: ".wh.x"}); err == nil {
		t.Error("a whiteout unpacked without root; want an error")
	}
}

func TestUnpackTruncated(t *testing.T) {
	b := layerTar(t, entry{name: "f", body: string(bytes.Repeat([]byte("x"), 4096))})
	if _, err := Unpack(t.TempDir(), bytes.NewReader(b[:1024]), UnpackOptions{Rootless: true}); err == nil {
		t.Error("a truncated layer unpacked without error")
	}
}

// FuzzUnpack: no layer, however malformed, makes Unpack panic or write
// outside its directory.
func FuzzUnpack(f *testing.F) {
	f.Add(layerTar(f, entry{name: "../x", body: "1"}))
	f.Add(layerTar(f, entry{name: "l", typ: tar.TypeSymlink, link: "/"}, entry{name: "l/x", body: "1"}))
	f.Add(layerTar(f, entry{name: "h", typ: tar.TypeLink, link: "../../x"}))
	f.Add(layerTar(f, entry{name: "d", typ: tar.TypeDir}, entry{name: "d/f", body: "1"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		base := t.TempDir()
		dir := filepath.Join(base, "layer")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_, _ = Unpack(dir, bytes.NewReader(b), UnpackOptions{Rootless: true})
		entries, err := os.ReadDir(base)
		if err != nil || len(entries) != 1 {
			t.Fatalf("something was written beside the layer: %v %v", entries, err)
		}
	})
}

func BenchmarkUnpack(b *testing.B) {
	var entries []entry
	body := string(bytes.Repeat([]byte("x"), 64<<10))
	for i := range 16 { // 1 MiB in 16 files
		entries = append(entries, entry{name: "d" + string(rune('a'+i%4)) + "/f" + string(rune('a'+i)), body: body})
	}
	layer := layerTar(b, entries...)
	base := b.TempDir()
	dir := filepath.Join(base, "layer")
	b.SetBytes(int64(len(layer)))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := Unpack(dir, bytes.NewReader(layer), UnpackOptions{Rootless: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUnpackStopsBeforeTheDiskFills: a layer that inflates past the free
// space the store keeps (a decompression bomb) stops with ErrNoRoom
// before it is written whole. MinFree is set above what any filesystem
// has free, so that the look at 32 MiB refuses.
func TestUnpackStopsBeforeTheDiskFills(t *testing.T) {
	const size = 3 * roomCheckEvery
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "bomb", Typeflag: tar.TypeReg, Mode: 0o644, Size: size})
		if err == nil {
			_, err = io.Copy(tw, io.LimitReader(zeros{}, size))
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	dir := t.TempDir()
	n, err := Unpack(dir, pr, UnpackOptions{Rootless: true, MinFree: 0.9999})
	pr.Close()
	if !errors.Is(err, ErrNoRoom) {
		t.Fatalf("unpacking %d MiB with 99.99%% to keep free: %v, want ErrNoRoom", size>>20, err)
	}
	if fi, serr := os.Stat(filepath.Join(dir, "bomb")); serr == nil && fi.Size() >= size {
		t.Errorf("the file was written whole (%d bytes) before the refusal", fi.Size())
	}
	t.Logf("refused after %d MiB: %v", n>>20, err)
}

// zeros reads zero bytes for ever.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
