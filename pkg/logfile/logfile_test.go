package logfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	if got := Tail(p, 3, 100); got != "" {
		t.Errorf("missing file: %q", got)
	}
	os.WriteFile(p, []byte("one\ntwo\nthree\nfour\n"), 0o600)
	if got := Tail(p, 2, 100); got != "three\nfour" {
		t.Errorf("Tail(2) = %q", got)
	}
	if got := Tail(p, 10, 9); got != "ree\nfour" {
		t.Errorf("Tail(10 lines, 9 bytes) = %q", got)
	}
	os.WriteFile(p, []byte(strings.Repeat("x", 1000)), 0o600)
	if got := Tail(p, 10, 10); len(got) != 10 {
		t.Errorf("long line cut to %d bytes", len(got))
	}
}
