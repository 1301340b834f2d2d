package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcessCost samples a process's CPU over d (its own and its reaped
// children's, e.g. probe commands), in percent of one core, and returns it
// with the process's RSS in MiB at the end.
func ProcessCost(pid int, d time.Duration) (cpuPercent, rssMiB float64) {
	t0 := cpuTicks(pid)
	time.Sleep(d)
	t1 := cpuTicks(pid)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return float64(t1-t0) / ticksPerSecond / d.Seconds() * 100, RSSMiB(pid)
}

func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may contain spaces): utime is
	// the 14th field, stime, cutime, cstime follow.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var sum int64
	for _, i := range []int{11, 12, 13, 14} {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		sum += v
	}
	return sum
}

// RSSMiB is a process's resident memory in MiB; 0 if it is gone. It counts
// the pages of the binary it touched, which processes of one binary share.
func RSSMiB(pid int) float64 { return statusMiB(pid, "VmRSS:") }

// PrivateMiB is a process's resident anonymous memory in MiB (heap, stacks):
// what each more process of the same binary costs.
func PrivateMiB(pid int) float64 { return statusMiB(pid, "RssAnon:") }

// PSSMiB is a process's proportional set size in MiB: its private memory
// plus its share of the pages it shares (a binary's, a library's).
func PSSMiB(pid int) float64 { return procMiB(pid, "smaps_rollup", "Pss:") }

func statusMiB(pid int, field string) float64 { return procMiB(pid, "status", field) }

func procMiB(pid int, file, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
