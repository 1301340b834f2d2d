package agent

import (
	"fmt"
	"maps"
	"os"
	"testing"

	"github.com/steadyplane/steadyplane/pkg/node/images"
)

func TestPodCIDRMismatch(t *testing.T) {
	for _, tt := range []struct {
		allocated, configured string
		mismatch              bool
	}{
		{"", "10.244.0.0/24", false},
		{"10.244.0.0/24", "10.244.0.0/24", false},
		{"10.244.0.0/24", "10.244.0.7/24", false}, // the same range, written with a host address
		{"10.244.1.0/24", "10.244.0.0/24", true},
		{"10.244.0.0/16", "10.244.0.0/24", true},
	} {
		if got := PodCIDRMismatch(tt.allocated, tt.configured); (got != "") != tt.mismatch {
			t.Errorf("PodCIDRMismatch(%q, %q) = %q, want a mismatch %v", tt.allocated, tt.configured, got, tt.mismatch)
		}
	}
}

func TestMissingLabels(t *testing.T) {
	want := map[string]string{"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux"}
	for _, tc := range []struct {
		name string
		have map[string]string
		out  map[string]string
	}{
		{"a Node made without labels", nil, want},
		{"all there", map[string]string{"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "team": "a"}, map[string]string{}},
		{"one differs", map[string]string{"kubernetes.io/hostname": "old", "kubernetes.io/os": "linux"}, map[string]string{"kubernetes.io/hostname": "n1"}},
	} {
		if got := MissingLabels(tc.have, want); !maps.Equal(got, tc.out) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.out)
		}
	}
}

func TestOSImage(t *testing.T) {
	read := func(content string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if p == "/etc/os-release" && content != "" {
				return []byte(content), nil
			}
			return nil, os.ErrNotExist
		}
	}
	if got := osImage(read("NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n")); got != "Debian GNU/Linux 12 (bookworm)" {
		t.Errorf("osImage = %q", got)
	}
	if got := osImage(read("")); got != "Unknown" {
		t.Errorf("osImage without os-release = %q, want Unknown", got)
	}
}

func TestNodeImages(t *testing.T) {
	var imgs []images.Image
	for i := range maxNodeImages + 5 {
		imgs = append(imgs, images.Image{ID: fmt.Sprintf("sha256:%064d", i), Size: int64(i), Names: []string{fmt.Sprintf("example.com/i:%d", i)},
			RepoDigests: []string{fmt.Sprintf("example.com/i@sha256:%064d", i)}})
	}
	got := nodeImages(imgs)
	if len(got) != maxNodeImages || got[0].SizeBytes != maxNodeImages+4 || got[0].Names[0] != fmt.Sprintf("example.com/i@sha256:%064d", maxNodeImages+4) {
		t.Errorf("nodeImages: %d images, first %+v; want the %d largest, digests first", len(got), got[0], maxNodeImages)
	}
}
