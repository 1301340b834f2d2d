package agent

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/steadyplane/steadyplane/pkg/node/podworker"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
	"github.com/steadyplane/steadyplane/pkg/node/stats"
)

// statsSample reads the node's and its running containers' use of CPU
// and memory, for the node API's summary and resource metrics. A static
// pod is named as its mirror pod is, which the API knows.
func (a *Agent) statsSample(context.Context) (stats.Sample, error) {
	now := time.Now()
	available, total := readMemInfo()
	cpu, _ := runc.NodeCPUUsage()
	s := stats.Sample{Time: now, Node: stats.NodeSample{Name: a.opts.NodeName, StartTime: bootTime(),
		CPUUsageNanoseconds: cpu, MemoryCapacity: total, MemoryAvailable: available}}
	a.mu.Lock()
	workers := make([]*podworker.Worker, 0, len(a.workers))
	for _, w := range a.workers {
		workers = append(workers, w)
	}
	a.mu.Unlock()
	for _, w := range workers {
		pod := w.Pod()
		if pod == nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		ps := stats.PodSample{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
		if pod.Status.StartTime != nil {
			ps.StartTime = pod.Status.StartTime.Time
		}
		if w.Static() {
			if m := a.mirrorFor(pod); m != nil {
				ps.UID = m.UID
			}
		}
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			view := w.Container(c.Name)
			if view == nil || view.Run == nil || view.Status.State.Running == nil {
				continue
			}
			m, ok := view.Run.(runtime.Measured)
			if !ok {
				continue
			}
			u, ok := m.Usage()
			if !ok {
				continue // ended meanwhile
			}
			ps.Containers = append(ps.Containers, stats.ContainerSample{Name: c.Name, StartTime: view.Status.State.Running.StartedAt.Time, Usage: u})
		}
		if len(ps.Containers) > 0 {
			s.Pods = append(s.Pods, ps)
		}
	}
	return s, nil
}

// bootTime is when the machine booted (/proc/stat's btime).
var bootTime = sync.OnceValue(func() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			if sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return time.Unix(sec, 0)
			}
		}
	}
	return time.Time{}
})
