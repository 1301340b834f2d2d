package agent

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// Hard eviction thresholds of the kubelet's defaults, which the Node's
// pressure conditions report against: memory.available<100Mi,
// nodefs.available<10%, imagefs.available<15%.
const (
	memoryAvailableMin   = 100 << 20
	nodefsAvailablePct   = 10
	imagefsAvailablePct  = 15
	pidAvailablePctFloor = 5
)

// nodeStats is what the pressure conditions are decided from.
type nodeStats struct {
	memoryAvailable  int64 // bytes; -1 when unknown
	nodefs, imagefs  images.DiskUsage
	pidsUsed, pidMax int64
}

// pressureConditions decides the Node's MemoryPressure, DiskPressure and
// PIDPressure as the kubelet reports them, with its reasons and messages;
// the node lifecycle controller taints the Node by them, so the scheduler
// keeps new pods off a node under pressure.
func pressureConditions(st nodeStats) []corev1.NodeCondition {
	free := func(u images.DiskUsage) float64 { return 100 - u.Percent() }
	memory := st.memoryAvailable >= 0 && st.memoryAvailable < memoryAvailableMin
	disk := st.nodefs.Total > 0 && free(st.nodefs) < nodefsAvailablePct || st.imagefs.Total > 0 && free(st.imagefs) < imagefsAvailablePct
	pids := st.pidMax > 0 && 100*(st.pidMax-st.pidsUsed) < pidAvailablePctFloor*st.pidMax
	cond := func(t corev1.NodeConditionType, pressure bool, okReason, okMsg, badReason, badMsg string) corev1.NodeCondition {
		if pressure {
			return corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue, Reason: badReason, Message: badMsg}
		}
		return corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, Reason: okReason, Message: okMsg}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, memory, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
		cond(corev1.NodeDiskPressure, disk, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", "KubeletHasDiskPressure", "kubelet has disk pressure"),
		cond(corev1.NodePIDPressure, pids, "KubeletHasSufficientPID", "kubelet has sufficient PID available", "KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
	}
}

// readNodeStats measures the node: MemAvailable, the filesystems of the
// agent's root directory and of its image store, and processes against
// pid_max.
func (a *Agent) readNodeStats() nodeStats {
	st := nodeStats{memoryAvailable: -1}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
				if kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64); err == nil {
					st.memoryAvailable = kb << 10
				}
			}
		}
	}
	st.nodefs, _ = images.Usage(a.opts.RootDir)
	if a.opts.Images != nil {
		st.imagefs, _ = images.Usage(a.opts.Images.Root())
	}
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		st.pidMax, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	if entries, err := os.ReadDir("/proc"); err == nil {
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				st.pidsUsed++
			}
		}
	}
	return st
}

// withTransitions keeps each condition's last transition time from old
// while its status is unchanged, and stamps now otherwise.
func withTransitions(conds, old []corev1.NodeCondition, now metav1.Time) []corev1.NodeCondition {
	for i := range conds {
		conds[i].LastHeartbeatTime, conds[i].LastTransitionTime = now, now
		for _, o := range old {
			if o.Type == conds[i].Type && o.Status == conds[i].Status {
				conds[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	return conds
}
