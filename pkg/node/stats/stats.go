// Package stats is the node's use of CPU and memory as the kubelet's
// summary API gives it (k8s.io/kubelet/pkg/apis/stats/v1alpha1): the node
// API's /stats/summary, and /metrics/resource through upstream's own
// collector, which metrics-server reads for kubectl top and the
// HorizontalPodAutoscaler.
//
// A Sample is what the agent reads (each running container's cgroup, the
// machine's); Summary turns two samples into the API's summary, CPU rates
// from their difference; Provider keeps the previous sample for the next
// call.
package stats

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// ContainerSample is one running container's usage.
type ContainerSample struct {
	Name string
	// StartTime is when its current run started (its status's
	// startedAt): a rate is taken only within one run.
	StartTime time.Time
	Usage     runtime.Usage
}

// PodSample is one pod's running containers.
type PodSample struct {
	Namespace, Name string
	UID             types.UID
	StartTime       time.Time
	Containers      []ContainerSample
}

// NodeSample is the machine's usage.
type NodeSample struct {
	Name string
	// StartTime is when the machine booted.
	StartTime           time.Time
	CPUUsageNanoseconds uint64
	// MemoryCapacity and MemoryAvailable are MemTotal and MemAvailable:
	// the working set is what is not available, as the eviction signal
	// memory.available counts it.
	MemoryCapacity, MemoryAvailable int64
}

// Sample is the node and its pods at one time.
type Sample struct {
	Time time.Time
	Node NodeSample
	Pods []PodSample
}

// Summary is the summary API's view of cur. With prev, an earlier sample,
// CPU usage has its rate (UsageNanoCores) where a container (the same run
// of it) or the node is in both.
func Summary(cur Sample, prev *Sample) *statsapi.Summary {
	at := metav1.NewTime(cur.Time)
	var dt float64
	prevCPU := map[string]uint64{}
	if prev != nil && cur.Time.After(prev.Time) {
		dt = cur.Time.Sub(prev.Time).Seconds()
		prevCPU[""] = prev.Node.CPUUsageNanoseconds
		for _, p := range prev.Pods {
			for _, c := range p.Containers {
				prevCPU[runKey(p, c)] = c.Usage.CPUUsageNanoseconds
			}
		}
	}
	rate := func(key string, now uint64) *uint64 {
		before, ok := prevCPU[key]
		if dt == 0 || !ok || now < before {
			return nil
		}
		r := uint64(float64(now-before) / dt)
		return &r
	}
	node := statsapi.NodeStats{NodeName: cur.Node.Name, StartTime: metav1.NewTime(cur.Node.StartTime),
		CPU: &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: ptr(cur.Node.CPUUsageNanoseconds), UsageNanoCores: rate("", cur.Node.CPUUsageNanoseconds)}}
	if cur.Node.MemoryCapacity > 0 && cur.Node.MemoryAvailable >= 0 {
		node.Memory = &statsapi.MemoryStats{Time: at, AvailableBytes: ptr(uint64(cur.Node.MemoryAvailable)),
			WorkingSetBytes: ptr(uint64(max(cur.Node.MemoryCapacity-cur.Node.MemoryAvailable, 0)))}
	}
	out := &statsapi.Summary{Node: node, Pods: []statsapi.PodStats{}}
	for _, p := range cur.Pods {
		ps := statsapi.PodStats{PodRef: statsapi.PodReference{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)}, StartTime: metav1.NewTime(p.StartTime)}
		var cpu, mem uint64
		var rates uint64
		allRates := len(p.Containers) > 0
		for _, c := range p.Containers {
			r := rate(runKey(p, c), c.Usage.CPUUsageNanoseconds)
			ps.Containers = append(ps.Containers, statsapi.ContainerStats{Name: c.Name, StartTime: metav1.NewTime(c.StartTime),
				CPU:    &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: ptr(c.Usage.CPUUsageNanoseconds), UsageNanoCores: r},
				Memory: &statsapi.MemoryStats{Time: at, WorkingSetBytes: ptr(uint64(c.Usage.MemoryWorkingSet))}})
			cpu += c.Usage.CPUUsageNanoseconds
			mem += uint64(c.Usage.MemoryWorkingSet)
			if r == nil {
				allRates = false
			} else {
				rates += *r
			}
		}
		if len(p.Containers) > 0 {
			ps.CPU = &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: ptr(cpu)}
			if allRates {
				ps.CPU.UsageNanoCores = ptr(rates)
			}
			ps.Memory = &statsapi.MemoryStats{Time: at, WorkingSetBytes: ptr(mem)}
		}
		out.Pods = append(out.Pods, ps)
	}
	return out
}

// runKey names one run of a container.
func runKey(p PodSample, c ContainerSample) string {
	return string(p.UID) + "/" + c.Name + "@" + c.StartTime.UTC().Format(time.RFC3339Nano)
}

func ptr[T any](v T) *T { return &v }

// MinRateWindow is the shortest time between two samples that a CPU rate
// is taken over: a rate over less would be mostly noise.
const MinRateWindow = time.Second

// Provider answers the summary API from samples, as the kubelet's
// stats.SummaryProvider (k8s.io/kubernetes/pkg/kubelet/server/stats).
type Provider struct {
	// Read takes a sample now.
	Read func(ctx context.Context) (Sample, error)

	mu sync.Mutex
	// prev is the last sample kept, before the one kept before it: each
	// at least MinRateWindow after the other.
	prev, before *Sample
}

// Get implements stats.SummaryProvider.
func (p *Provider) Get(ctx context.Context, _ bool) (*statsapi.Summary, error) {
	cur, err := p.Read(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prev != nil && cur.Time.Sub(p.prev.Time) < MinRateWindow {
		// Too close to the last: the rate is over the one before it.
		return Summary(cur, p.before), nil
	}
	s := Summary(cur, p.prev)
	p.before, p.prev = p.prev, &cur
	return s, nil
}

// GetCPUAndMemoryStats implements stats.SummaryProvider: the summary has
// nothing but CPU and memory.
func (p *Provider) GetCPUAndMemoryStats(ctx context.Context) (*statsapi.Summary, error) {
	return p.Get(ctx, false)
}
