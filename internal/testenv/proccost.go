package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/steadyplane/steadyplane/pkg/procfs"
)

// ProcessCost samples a process's CPU over d (its own and its reaped
// children's, e.g. probe commands), in percent of one core, and returns it
// with the process's RSS in MiB at the end.
func ProcessCost(pid int, d time.Duration) (cpuPercent, rssMiB float64) {
	c0 := CPUSeconds(pid)
	time.Sleep(d)
	return (CPUSeconds(pid) - c0) / d.Seconds() * 100, RSSMiB(pid)
}

// CPUSeconds is the CPU time a process has used so far, its own and its
// reaped children's; 0 if it is gone.
func CPUSeconds(pid int) float64 {
	const ticksPerSecond = 100 // USER_HZ on Linux
	return float64(cpuTicks(pid)) / ticksPerSecond
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

// ClusterProcess is one process of an up's cluster.
type ClusterProcess struct {
	Pid int
	// Name is the steadyplane command it runs ("apiserver", "node", "up",
	// "dns"), or its program's name (conmon, a container's program).
	Name string
}

// ClusterProcesses are the processes of the up whose data directory is
// dataDir: those whose argument list names the directory (up, the node
// agent, static pods, conmon), and their descendants (containers, which
// name nothing of it, such as CoreDNS).
func ClusterProcesses(dataDir string) []ClusterProcess {
	entries, _ := os.ReadDir("/proc")
	argv, parent := map[int][]string{}, map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		argv[pid] = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		parent[pid] = procfs.ParentPid(pid)
	}
	in := func(pid int) bool {
		for p := pid; p > 1; p = parent[p] {
			for _, a := range argv[p] {
				if strings.Contains(a, dataDir) {
					return true
				}
			}
		}
		return false
	}
	var procs []ClusterProcess
	for pid, args := range argv {
		if in(pid) {
			procs = append(procs, ClusterProcess{Pid: pid, Name: processName(args)})
		}
	}
	return procs
}

// processName is the steadyplane command of argv, or its program's name.
func processName(argv []string) string {
	prog := filepath.Base(argv[0])
	if strings.HasPrefix(prog, "steadyplane") && len(argv) > 1 {
		return argv[1]
	}
	return prog
}
