package images

import (
	"testing"
	"time"
)

// TestGCPlan: the kubelet's image garbage collection, row by row.
func TestGCPlan(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2026, 11, d, 0, 0, 0, 0, time.UTC) }
	imgs := []Image{
		{ID: "old-unused", Size: 10, Created: day(1), LastUsed: day(2)},
		{ID: "recent", Size: 10, Created: day(1), LastUsed: day(20)},
		{ID: "never-used", Size: 10, Created: day(3)},
		{ID: "running", Size: 50, Created: day(1), LastUsed: day(1)},
	}
	inUse := map[string]bool{"running": true}
	ids := func(p []Image) []string {
		var out []string
		for _, img := range p {
			out = append(out, img.ID)
		}
		return out
	}
	tests := []struct {
		name  string
		usage DiskUsage
		want  []string
	}{
		{"below the high threshold: nothing", DiskUsage{Total: 100, Used: 84}, nil},
		{"at 86%: the least recently used until 80%", DiskUsage{Total: 100, Used: 86}, []string{"old-unused"}},
		{"at 95%: then the never used, by age", DiskUsage{Total: 100, Used: 95}, []string{"old-unused", "never-used"}},
		{"at 100%: as many as free 20%", DiskUsage{Total: 100, Used: 100}, []string{"old-unused", "never-used"}},
		{"more to free than unused images hold: every unused one, never the running one", DiskUsage{Total: 200, Used: 200}, []string{"old-unused", "never-used", "recent"}},
		{"an empty filesystem report: nothing", DiskUsage{}, nil},
	}
	for _, tc := range tests {
		got := ids(GCPlan(imgs, inUse, tc.usage, GCHighPercent, GCLowPercent))
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

func TestUsage(t *testing.T) {
	u, err := Usage(t.TempDir())
	if err != nil || u.Total == 0 || u.Used > u.Total {
		t.Errorf("Usage = %+v, %v", u, err)
	}
}
