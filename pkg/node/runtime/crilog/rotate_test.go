package crilog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRotatingKeepsTheNewestFiles: a writer as fast as it can keeps at most
// maxFiles files of at most maxSize each, never splitting a record, and the
// newest records are in the current file.
func TestRotatingKeepsTheNewestFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	r, err := OpenRotating(path, 1000, 3)
	if err != nil {
		t.Fatal(err)
	}
	tick := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { tick = tick.Add(time.Second); return tick }
	f := NewFile(r)
	s := f.Stream("stdout")
	for i := range 500 {
		if _, err := s.Write([]byte(strings.Repeat("x", 50) + string(rune('a'+i%26)) + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Fatalf("%d files, want 3 (the current and 2 rotated)", len(entries))
	}
	var total int
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 1000 || !bytes.HasSuffix(b, []byte("\n")) {
			t.Errorf("%s: %d bytes (max 1000), ends %q", e.Name(), len(b), b[len(b)-5:])
		}
		total += len(Lines(b))
	}
	cur, _ := os.ReadFile(path)
	lines := Lines(cur)
	if last := lines[len(lines)-1]; last != strings.Repeat("x", 50)+string(rune('a'+499%26)) {
		t.Errorf("the current file's last line %q is not the last written", last)
	}
	if total >= 500 {
		t.Errorf("%d lines kept of 500: nothing was pruned", total)
	}
	rotated, _ := Rotated(path)
	if len(rotated) != 2 || rotated[0] >= rotated[1] {
		t.Errorf("rotated files %v, want 2, oldest first", rotated)
	}
	if _, err := OpenRotating(path, 0, 1); err == nil {
		t.Error("a max size of 0 accepted")
	}
}
