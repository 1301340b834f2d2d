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

// cgroupUsage reads the memory working set, process count and CPU time
// of the cgroup at path under root.
func cgroupUsage(root, path string) (runtime.Usage, bool) {
	if used, ok := readInt(filepath.Join(root, path, "memory.current")); ok {
		pids, _ := readInt(filepath.Join(root, path, "pids.current"))
		inactive, _ := statField(filepath.Join(root, path, "memory.stat"), "inactive_file")
		cpu, _ := cgroupCPU(root, path)
		return runtime.Usage{MemoryWorkingSet: max(used-inactive, 0), Processes: pids, CPUUsageNanoseconds: cpu}, true
	}
	used, ok := readInt(filepath.Join(root, "memory", path, "memory.usage_in_bytes"))
	if !ok {
		return runtime.Usage{}, false
	}
	pids, _ := readInt(filepath.Join(root, "pids", path, "pids.current"))
	inactive, _ := statField(filepath.Join(root, "memory", path, "memory.stat"), "total_inactive_file")
	cpu, _ := cgroupCPU(root, path)
	return runtime.Usage{MemoryWorkingSet: max(used-inactive, 0), Processes: pids, CPUUsageNanoseconds: cpu}, true
}

// cgroupCPU reads the CPU time the cgroup at path under root has used:
// cgroup v2's cpu.stat usage_usec, or v1's cpuacct.usage (nanoseconds).
func cgroupCPU(root, path string) (uint64, bool) {
	if usec, ok := statField(filepath.Join(root, path, "cpu.stat"), "usage_usec"); ok {
		return uint64(usec) * 1000, true
	}
	ns, ok := readInt(filepath.Join(root, "cpuacct", path, "cpuacct.usage"))
	return uint64(ns), ok
}

// NodeCPUUsage is the CPU time the whole machine has used since it
// booted (the root cgroup's), all cores summed.
func NodeCPUUsage() (uint64, bool) { return cgroupCPU(cgroupRoot, "") }

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
