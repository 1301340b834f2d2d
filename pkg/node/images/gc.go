package images

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// Image garbage collection thresholds, as the kubelet's
// --image-gc-high-threshold and --image-gc-low-threshold: above HighPercent
// of the store's filesystem in use, unused images are removed, least
// recently used first, until LowPercent would be reached.
const (
	GCHighPercent = 85
	GCLowPercent  = 80
)

// DiskUsage is the use of a filesystem, in bytes.
type DiskUsage struct {
	Total, Used uint64
}

// Percent is the share of the filesystem in use.
func (u DiskUsage) Percent() float64 {
	if u.Total == 0 {
		return 0
	}
	return 100 * float64(u.Used) / float64(u.Total)
}

// Usage returns the use of the filesystem that holds dir.
func Usage(dir string) (DiskUsage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return DiskUsage{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	total := st.Blocks * uint64(st.Bsize)
	free := st.Bavail * uint64(st.Bsize)
	return DiskUsage{Total: total, Used: total - free}, nil
}

// GCPlan decides which images to remove, as the kubelet's image manager:
// nothing while usage is below high percent; else images no container uses,
// least recently used first (never used: oldest first), until what they
// free brings usage to low percent or below. It is a pure function of its
// inputs.
func GCPlan(imgs []Image, inUse map[string]bool, usage DiskUsage, high, low float64) []Image {
	if usage.Percent() < high {
		return nil
	}
	target := uint64(low / 100 * float64(usage.Total))
	if usage.Used <= target {
		return nil
	}
	toFree := usage.Used - target
	var candidates []Image
	for _, img := range imgs {
		if !inUse[img.ID] {
			candidates = append(candidates, img)
		}
	}
	lastUsed := func(img Image) int64 {
		if img.LastUsed.IsZero() {
			return img.Created.UnixNano()
		}
		return img.LastUsed.UnixNano()
	}
	slices.SortStableFunc(candidates, func(a, b Image) int {
		switch la, lb := lastUsed(a), lastUsed(b); {
		case la < lb:
			return -1
		case la > lb:
			return 1
		}
		return 0
	})
	var plan []Image
	var freed uint64
	for _, img := range candidates {
		if freed >= toFree {
			break
		}
		plan = append(plan, img)
		freed += uint64(max(img.Size, 0))
	}
	return plan
}

// CollectGarbage removes the images GCPlan picks for the store's
// filesystem now, and returns them.
func (s *Store) CollectGarbage() ([]Image, error) {
	usage, err := Usage(s.root)
	if err != nil {
		return nil, err
	}
	imgs, err := s.List()
	if err != nil {
		return nil, err
	}
	var removed []Image
	for _, img := range GCPlan(imgs, s.InUse(), usage, GCHighPercent, GCLowPercent) {
		if _, err := s.Remove(img.ID); err != nil {
			return removed, fmt.Errorf("removing image %s: %w", img.ID, err)
		}
		removed = append(removed, img)
	}
	return removed, nil
}
