package podworker

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// logPath is where the current run of container c of pod logs to.
func (w *Worker) logPath(pod *corev1.Pod, c *container) string {
	return runLogPath(w.podDir(pod), c.spec.Name, c.restarts)
}

// pruneRunLogs removes the logs (and rotated logs) of container name's runs
// before run-1: kubectl logs reads the current run and, with --previous,
// the one before; a crash-looping container must not fill the disk with
// the rest. The termination-log files of those runs go too.
func pruneRunLogs(podDir, name string, run int32) {
	entries, err := os.ReadDir(filepath.Join(podDir, name))
	if err != nil {
		return
	}
	for _, e := range entries {
		n := e.Name()
		num := strings.TrimPrefix(n, "termination-log-")
		if i := strings.Index(num, ".log"); i > 0 {
			num = num[:i]
		}
		r, err := strconv.Atoi(num)
		if err != nil || int32(r) >= run-1 {
			continue
		}
		if strings.HasPrefix(n, "termination-log-") || strings.Contains(n, ".log") {
			_ = os.Remove(filepath.Join(podDir, name, n))
		}
	}
}

// runLogPath is where run number run of container name logs to.
func runLogPath(podDir, name string, run int32) string {
	return filepath.Join(podDir, name, strconv.Itoa(int(run))+".log")
}
