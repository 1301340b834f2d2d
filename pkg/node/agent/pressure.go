package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"

	"github.com/steadyplane/steadyplane/pkg/node/images"
)

// DefaultEvictionHard are the node's hard eviction thresholds, in the
// kubelet's --eviction-hard form: the kubelet's defaults (memory.available
// 100Mi, nodefs.available 10%, imagefs.available 15%) and pid.available
// 5%, which the kubelet leaves unset but a node that runs its own control
// plane needs.
var DefaultEvictionHard = map[string]string{
	string(evictionapi.SignalMemoryAvailable):  "100Mi",
	string(evictionapi.SignalNodeFsAvailable):  "10%",
	string(evictionapi.SignalImageFsAvailable): "15%",
	string(evictionapi.SignalPIDAvailable):     "5%",
}

// measuredSignals are the eviction signals the agent measures, in the
// kubelet's order of eviction priority (memory first).
var measuredSignals = []evictionapi.Signal{evictionapi.SignalMemoryAvailable, evictionapi.SignalNodeFsAvailable, evictionapi.SignalImageFsAvailable, evictionapi.SignalPIDAvailable}

// ParseEvictionHard parses hard eviction thresholds given as the kubelet's
// --eviction-hard (signal to quantity or percentage), with upstream's
// parser; a signal the agent does not measure is refused, never ignored.
func ParseEvictionHard(hard map[string]string) ([]evictionapi.Threshold, error) {
	ths, err := eviction.ParseThresholdConfig(nil, hard, nil, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("--eviction-hard: %w", err)
	}
	for _, th := range ths {
		if !slices.Contains(measuredSignals, th.Signal) {
			return nil, fmt.Errorf("--eviction-hard: the steadyplane node agent does not measure %s; it measures %v", th.Signal, measuredSignals)
		}
	}
	return ths, nil
}

// nodeStats is what the pressure conditions are decided from.
type nodeStats struct {
	memoryAvailable, memoryTotal int64 // bytes; available -1 when unknown
	nodefs, imagefs              images.DiskUsage
	pidsUsed, pidMax             int64
}

// observe returns what is available of signal's resource and its capacity
// (bytes or processes); false when it is not known.
func (st nodeStats) observe(signal evictionapi.Signal) (available, capacity int64, ok bool) {
	disk := func(u images.DiskUsage) (int64, int64, bool) {
		return int64(u.Total) - int64(u.Used), int64(u.Total), u.Total > 0
	}
	switch signal {
	case evictionapi.SignalMemoryAvailable:
		return st.memoryAvailable, st.memoryTotal, st.memoryAvailable >= 0 && st.memoryTotal > 0
	case evictionapi.SignalNodeFsAvailable:
		return disk(st.nodefs)
	case evictionapi.SignalImageFsAvailable:
		return disk(st.imagefs)
	case evictionapi.SignalPIDAvailable:
		return st.pidMax - st.pidsUsed, st.pidMax, st.pidMax > 0
	}
	return 0, 0, false
}

// crossing is a threshold the node has crossed.
type crossing struct {
	signal               evictionapi.Signal
	threshold, available int64
}

// crossedThresholds returns the thresholds st has crossed, in the order of
// measuredSignals (the kubelet's eviction priority).
func crossedThresholds(st nodeStats, ths []evictionapi.Threshold) []crossing {
	var out []crossing
	for _, signal := range measuredSignals {
		for _, th := range ths {
			if th.Signal != signal {
				continue
			}
			available, capacity, ok := st.observe(signal)
			if !ok {
				continue
			}
			limit := evictionapi.GetThresholdQuantity(th.Value, resource.NewQuantity(capacity, resource.BinarySI)).Value()
			if available < limit {
				out = append(out, crossing{signal: signal, threshold: limit, available: available})
				break
			}
		}
	}
	return out
}

// pressureConditions decides the Node's MemoryPressure, DiskPressure and
// PIDPressure as the kubelet reports them against thresholds ths, with its
// reasons and messages; the node lifecycle controller taints the Node by
// them, so the scheduler keeps new pods off a node under pressure.
func pressureConditions(st nodeStats, ths []evictionapi.Threshold) []corev1.NodeCondition {
	var memory, disk, pids bool
	for _, c := range crossedThresholds(st, ths) {
		switch c.signal {
		case evictionapi.SignalMemoryAvailable:
			memory = true
		case evictionapi.SignalNodeFsAvailable, evictionapi.SignalImageFsAvailable:
			disk = true
		case evictionapi.SignalPIDAvailable:
			pids = true
		}
	}
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
	st := nodeStats{}
	st.memoryAvailable, st.memoryTotal = readMemInfo()
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

// readMemInfo reads MemAvailable and MemTotal, in bytes (available -1
// when unknown).
func readMemInfo() (available, total int64) {
	available = -1
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return available, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		for field, dst := range map[string]*int64{"MemAvailable:": &available, "MemTotal:": &total} {
			if v, ok := strings.CutPrefix(sc.Text(), field); ok {
				if kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64); err == nil {
					*dst = kb << 10
				}
			}
		}
	}
	return available, total
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
