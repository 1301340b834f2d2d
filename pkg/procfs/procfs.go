// Package procfs finds processes by their argument lists in /proc, and
// tells whether one still runs: how "up" waits for a static pod's process
// to be gone, how an upgrade tells that a release's up has died, and how
// tests find the processes they started.
package procfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Find returns the pids of the processes whose argument list matches.
// Processes that end while it reads, and kernel threads (no arguments), are
// skipped.
func Find(match func(argv []string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// SameNetNS says whether process pid shares this process's network
// namespace (the packet filter, addresses and ports are per namespace);
// false when that cannot be read.
func SameNetNS(pid int) bool {
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return false
	}
	theirs, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net"))
	return err == nil && theirs == own
}

// Running says process pid exists and has not ended: a zombie (ended, not
// yet reaped by its parent) is not running.
func Running(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')', as comm may
	// hold anything.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}

// StartTime is when process pid started, in clock ticks since boot
// (field 22 of /proc/<pid>/stat): with the pid it names one process,
// where a pid alone may be another's after a reboot.
func StartTime(pid int) (uint64, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return 0, false
	}
	t, err := strconv.ParseUint(fields[19], 10, 64)
	return t, err == nil
}

// ParentPid is the parent of process pid (field 4 of /proc/<pid>/stat),
// or 0 when pid is gone.
func ParentPid(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// InPod says whether process pid runs in a container of the pod with uid:
// the node agent names each container's cgroup <pod UID>_<container>, so
// the pod's processes are told from those of other clusters' pods on the
// same machine.
func InPod(pid int, uid string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	return err == nil && uid != "" && strings.Contains(string(b), "/"+uid+"_")
}
