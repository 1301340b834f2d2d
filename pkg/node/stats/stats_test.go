package stats

import (
	"context"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

var t0 = time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)

func sample(at time.Duration, nodeCPU uint64, containers ...ContainerSample) Sample {
	return Sample{Time: t0.Add(at),
		Node: NodeSample{Name: "n1", StartTime: t0.Add(-time.Hour), CPUUsageNanoseconds: nodeCPU, MemoryCapacity: 1000, MemoryAvailable: 400},
		Pods: []PodSample{{Namespace: "ns", Name: "p", UID: "u1", StartTime: t0, Containers: containers}}}
}

func ctr(name string, started time.Duration, cpu uint64, mem int64) ContainerSample {
	return ContainerSample{Name: name, StartTime: t0.Add(started), Usage: runtime.Usage{CPUUsageNanoseconds: cpu, MemoryWorkingSet: mem}}
}

func TestSummary(t *testing.T) {
	for _, tc := range []struct {
		name           string
		cur            Sample
		prev           *Sample
		nodeRate       int64 // -1: none
		containerRates map[string]int64
		podRate        int64
	}{
		{name: "one sample: totals, no rates", cur: sample(10*time.Second, 5e9, ctr("a", 0, 2e9, 100), ctr("b", 0, 1e9, 50)),
			nodeRate: -1, containerRates: map[string]int64{"a": -1, "b": -1}, podRate: -1},
		{name: "two samples 2s apart: rates", cur: sample(12*time.Second, 7e9, ctr("a", 0, 3e9, 100), ctr("b", 0, 1e9, 50)),
			prev:     ptr(sample(10*time.Second, 5e9, ctr("a", 0, 2e9, 100), ctr("b", 0, 1e9, 50))),
			nodeRate: 1e9, containerRates: map[string]int64{"a": 5e8, "b": 0}, podRate: 5e8},
		{name: "a container restarted meanwhile: no rate for it, nor its pod", cur: sample(12*time.Second, 7e9, ctr("a", 11*time.Second, 1e8, 100), ctr("b", 0, 1e9, 50)),
			prev:     ptr(sample(10*time.Second, 5e9, ctr("a", 0, 2e9, 100), ctr("b", 0, 1e9, 50))),
			nodeRate: 1e9, containerRates: map[string]int64{"a": -1, "b": 0}, podRate: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Summary(tc.cur, tc.prev)
			if got := rateOf(s.Node.CPU.UsageNanoCores); got != tc.nodeRate {
				t.Errorf("node rate %d; want %d", got, tc.nodeRate)
			}
			if *s.Node.Memory.WorkingSetBytes != 600 || *s.Node.Memory.AvailableBytes != 400 || !s.Node.CPU.Time.Time.Equal(tc.cur.Time) {
				t.Errorf("node memory %+v at %v; want 600 working, 400 available at the sample's time", s.Node.Memory, s.Node.CPU.Time)
			}
			if len(s.Pods) != 1 || s.Pods[0].PodRef.Name != "p" || s.Pods[0].PodRef.UID != "u1" {
				t.Fatalf("pods %+v", s.Pods)
			}
			pod := s.Pods[0]
			var cpu uint64
			for _, c := range tc.cur.Pods[0].Containers {
				cpu += c.Usage.CPUUsageNanoseconds
			}
			if *pod.CPU.UsageCoreNanoSeconds != cpu || *pod.Memory.WorkingSetBytes != 150 || rateOf(pod.CPU.UsageNanoCores) != tc.podRate {
				t.Errorf("pod cpu %d rate %d memory %d; want %d, %d, 150", *pod.CPU.UsageCoreNanoSeconds, rateOf(pod.CPU.UsageNanoCores), *pod.Memory.WorkingSetBytes, cpu, tc.podRate)
			}
			for _, c := range pod.Containers {
				if got := rateOf(c.CPU.UsageNanoCores); got != tc.containerRates[c.Name] {
					t.Errorf("container %s rate %d; want %d", c.Name, got, tc.containerRates[c.Name])
				}
				if c.StartTime.IsZero() || c.CPU.Time.IsZero() || c.Memory.Time.IsZero() {
					t.Errorf("container %s without its times: %+v", c.Name, c)
				}
			}
		})
	}
}

func rateOf(p *uint64) int64 {
	if p == nil {
		return -1
	}
	return int64(*p)
}

// TestProvider: each answer's rate is over at least MinRateWindow, the
// samples kept moving on as time does.
func TestProvider(t *testing.T) {
	var at time.Duration
	var cpu uint64
	p := &Provider{Read: func(context.Context) (Sample, error) { return sample(at, cpu, ctr("a", 0, cpu, 10)), nil }}
	get := func(d time.Duration, c uint64) int64 {
		t.Helper()
		at, cpu = d, c
		s, err := p.GetCPUAndMemoryStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return rateOf(s.Node.CPU.UsageNanoCores)
	}
	steps := []struct {
		at   time.Duration
		cpu  uint64
		rate int64
	}{
		{0, 0, -1},                            // nothing before
		{100 * time.Millisecond, 1e8, -1},     // too close, and nothing before the last
		{2 * time.Second, 2e9, 1e9},           // against 0s
		{2500 * time.Millisecond, 2.5e9, 1e9}, // too close to 2s: against 0s
		{4 * time.Second, 6e9, 2e9},           // against 2s
	}
	for _, st := range steps {
		if got := get(st.at, st.cpu); got != st.rate {
			t.Errorf("at %v: rate %d; want %d", st.at, got, st.rate)
		}
	}
}

// BenchmarkSummary builds the summary of a node with 100 pods of two
// containers each, against the sample before: the agent's work per scrape
// besides reading the cgroups.
func BenchmarkSummary(b *testing.B) {
	mk := func(at time.Duration, cpu uint64) Sample {
		s := sample(at, cpu)
		s.Pods = nil
		for i := range 100 {
			s.Pods = append(s.Pods, PodSample{Namespace: "ns", Name: "p" + strconv.Itoa(i), UID: types.UID("u" + strconv.Itoa(i)), StartTime: t0,
				Containers: []ContainerSample{ctr("a", 0, cpu, 1<<20), ctr("b", 0, cpu/2, 2<<20)}})
		}
		return s
	}
	prev, cur := mk(0, 1e9), mk(15*time.Second, 2e9)
	b.ReportAllocs()
	for b.Loop() {
		Summary(cur, &prev)
	}
}
