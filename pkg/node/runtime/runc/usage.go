package runc

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

var _ runtime.Measured = (*container)(nil)

// cgroupRoot is where the cgroup filesystems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// Usage implements runtime.Measured from the container's cgroup (v2, or
// v1's memory and pids hierarchies).
func (c *container) Usage() (runtime.Usage, bool) {
	return cgroupUsage(cgroupRoot, c.r.cgroupsPath(c.id))
}

// cgroupUsage reads the memory working set and process count of the
// cgroup at path under root.
func cgroupUsage(root, path string) (runtime.Usage, bool) {
	if used, ok := readInt(filepath.Join(root, path, "memory.current")); ok {
		pids, _ := readInt(filepath.Join(root, path, "pids.current"))
		inactive, _ := statField(filepath.Join(root, path, "memory.stat"), "inactive_file")
		return runtime.Usage{MemoryWorkingSet: max(used-inactive, 0), Processes: pids}, true
	}
	used, ok := readInt(filepath.Join(root, "memory", path, "memory.usage_in_bytes"))
	if !ok {
		return runtime.Usage{}, false
	}
	pids, _ := readInt(filepath.Join(root, "pids", path, "pids.current"))
	inactive, _ := statField(filepath.Join(root, "memory", path, "memory.stat"), "total_inactive_file")
	return runtime.Usage{MemoryWorkingSet: max(used-inactive, 0), Processes: pids}, true
}

func readInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// statField returns the value of a "name value" line of a cgroup file
// (memory.stat, memory.events, ...); false when there is none.
func statField(path, name string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
