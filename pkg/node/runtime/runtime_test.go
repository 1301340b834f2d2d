package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/steadyplane/steadyplane/internal/testci"
)

func TestChoose(t *testing.T) {
	missing := errors.New("runc is not installed")
	cases := []struct {
		mode        string
		unavailable error
		name        string
		warns       bool
		err         bool
	}{
		{"auto", nil, "runc", false, false},
		{"", nil, "runc", false, false},
		{"auto", missing, "", false, true},
		{"runc", nil, "runc", false, false},
		{"runc", missing, "", false, true},
		{"process", nil, "process", true, false},
		{"process", missing, "process", true, false},
		{"docker", nil, "", false, true},
	}
	for _, tc := range cases {
		name, warning, err := Choose(tc.mode, tc.unavailable)
		if name != tc.name || (warning != "") != tc.warns || (err != nil) != tc.err {
			t.Errorf("Choose(%q, %v) = %q, %q, %v", tc.mode, tc.unavailable, name, warning, err)
		}
		if tc.warns && !strings.Contains(warning, "NOT isolated") {
			t.Errorf("warning %q does not say pods are not isolated", warning)
		}
	}
}

func TestOverlayOptions(t *testing.T) {
	if _, err := OverlayOptions(nil, "/u", "/w"); err == nil {
		t.Error("no layers accepted")
	}
	if _, err := OverlayOptions([]string{"/a:b"}, "/u", "/w"); err == nil {
		t.Error("a colon in a layer path accepted")
	}
	if _, err := OverlayOptions([]string{"/a"}, "/u,x", "/w"); err == nil {
		t.Error("a comma in the upper path accepted")
	}
	long := make([]string, 100)
	for i := range long {
		long[i] = "/var/lib/steadyplane/node/images/layers/" + strings.Repeat("a", 64)
	}
	if _, err := OverlayOptions(long, "/u", "/w"); err == nil {
		t.Error("options over a page accepted")
	}
	for _, tt := range []struct {
		upper, want string
	}{
		{"/u", "lowerdir=/l2:/l1,upperdir=/u,workdir=/w"},
		{"", "lowerdir=/l2:/l1"},
	} {
		got, err := OverlayOptions([]string{"/l2", "/l1"}, tt.upper, "/w")
		if err != nil || got != tt.want {
			t.Errorf("OverlayOptions(upper %q) = %q, %v; want %q", tt.upper, got, err, tt.want)
		}
	}
}

// TestMountLayersReadOnly mounts one layer and two layers as an image
// volume: the upper layer wins, nothing can be written, a second call keeps
// the mount, and UnmountUnder takes it down.
func TestMountLayersReadOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		testci.CannotRun(t, "mounting overlayfs needs root")
	}
	dir := t.TempDir()
	lower, upper := filepath.Join(dir, "l1"), filepath.Join(dir, "l2")
	for path, body := range map[string]string{filepath.Join(lower, "a"): "lower", filepath.Join(lower, "b"): "lower", filepath.Join(upper, "a"): "upper"} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name   string
		layers []string
		want   map[string]string
	}{
		{"one layer", []string{lower}, map[string]string{"a": "lower", "b": "lower"}},
		{"two layers", []string{upper, lower}, map[string]string{"a": "upper", "b": "lower"}},
	} {
		target := filepath.Join(dir, "vol", tt.name)
		for i := 0; i < 2; i++ {
			if err := MountLayersReadOnly(target, filepath.Join(dir, "vol", "."+tt.name+"-empty"), tt.layers); err != nil {
				t.Fatalf("%s, mount %d: %v", tt.name, i+1, err)
			}
		}
		for f, want := range tt.want {
			if b, err := os.ReadFile(filepath.Join(target, f)); err != nil || string(b) != want {
				t.Errorf("%s: %s = %q, %v; want %q", tt.name, f, b, err, want)
			}
		}
		if err := os.WriteFile(filepath.Join(target, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			t.Errorf("%s: a write gave %v, want EROFS", tt.name, err)
		}
		ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
		if err != nil || len(ms) != 1 {
			t.Errorf("%s: %d mounts at the target after two calls (%v), want 1", tt.name, len(ms), err)
		}
	}
	if err := UnmountUnder(filepath.Join(dir, "vol")); err != nil {
		t.Fatal(err)
	}
	if ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(filepath.Join(dir, "vol"))); len(ms) != 0 {
		t.Errorf("%d mounts left after UnmountUnder", len(ms))
	}
}
