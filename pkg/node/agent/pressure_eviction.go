package agent

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	v1resource "k8s.io/kubernetes/pkg/api/v1/resource"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	kubelettypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/steadyplane/steadyplane/pkg/node/podworker"
)

// Under pressure the agent evicts pods as the kubelet's eviction manager
// does, one per check: for memory and disk, the pods using more than they
// request first, then lower priority first, then those using the most above
// their request; for processes, lower priority first, then the most
// processes. Static pods and critical pods (system-node-critical and
// system-cluster-critical priority) are never evicted: the control plane
// stays.

// podUsage is what one pod uses of the resource under pressure.
type podUsage struct {
	pod *corev1.Pod
	// used is bytes of memory or disk, or processes; known is false when
	// it could not be measured (such pods go first, as the kubelet's).
	used  int64
	known bool
}

// pressureResource is the resource a signal's eviction relieves.
func pressureResource(s evictionapi.Signal) corev1.ResourceName {
	switch s {
	case evictionapi.SignalMemoryAvailable:
		return corev1.ResourceMemory
	case evictionapi.SignalPIDAvailable:
		return "pids"
	}
	return corev1.ResourceEphemeralStorage
}

// rankForEviction orders pods for eviction under pressure on res, the most
// deserving first (a stable sort: ties keep their order).
func rankForEviction(pods []podUsage, res corev1.ResourceName) {
	request := func(p podUsage) int64 {
		if res == "pids" {
			return 0
		}
		q := v1resource.GetResourceRequestQuantity(p.pod, res)
		return q.Value()
	}
	slices.SortStableFunc(pods, func(a, b podUsage) int {
		if a.known != b.known {
			if !a.known {
				return -1
			}
			return 1
		}
		if res != "pids" {
			ea, eb := a.used > request(a), b.used > request(b)
			if ea != eb {
				if ea {
					return -1
				}
				return 1
			}
		}
		if pa, pb := corev1helpers.PodPriority(a.pod), corev1helpers.PodPriority(b.pod); pa != pb {
			if pa < pb {
				return -1
			}
			return 1
		}
		da, db := a.used-request(a), b.used-request(b)
		switch {
		case da > db:
			return -1
		case da < db:
			return 1
		}
		return 0
	})
}

// evictable tells whether the agent may evict pod under pressure: not a
// static or mirror pod, not critical.
func evictable(pod *corev1.Pod) bool {
	return !kubelettypes.IsCriticalPod(pod)
}

// evictionMessage says why pod is evicted, as the kubelet's message.
func evictionMessage(c crossing, res corev1.ResourceName, u podUsage) string {
	unit := func(n int64) string {
		if res == "pids" {
			return fmt.Sprint(n)
		}
		return resource.NewQuantity(n, resource.BinarySI).String()
	}
	req := "0"
	if res != "pids" {
		q := v1resource.GetResourceRequestQuantity(u.pod, res)
		req = q.String()
	}
	return fmt.Sprintf("The node was low on resource: %s. Threshold quantity: %s, available: %s. Pod %s was using %s, request is %s. ",
		res, unit(c.threshold), unit(c.available), u.pod.Name, unit(u.used), req)
}

// evictUnderPressure is the agent's eviction manager: when the node has
// crossed a threshold, it evicts the first pod in the order of
// rankForEviction for the most urgent one.
func (a *Agent) evictUnderPressure(ctx context.Context) {
	crossed := crossedThresholds(a.readNodeStats(), a.opts.EvictionHard)
	if len(crossed) == 0 {
		return
	}
	c := crossed[0]
	res := pressureResource(c.signal)
	a.mu.Lock()
	workers := make([]*podworker.Worker, 0, len(a.workers))
	for _, w := range a.workers {
		workers = append(workers, w)
	}
	a.mu.Unlock()
	var cands []podUsage
	byPod := map[*corev1.Pod]*podworker.Worker{}
	for _, w := range workers {
		pod, ok := w.EvictionCandidate()
		if !ok || !evictable(pod) {
			continue
		}
		u := podUsage{pod: pod}
		u.used, u.known = w.Usage(pod, res)
		cands = append(cands, u)
		byPod[u.pod] = w
	}
	if len(cands) == 0 {
		klog.InfoS("Node under pressure, and no pod to evict", "signal", c.signal, "available", c.available, "threshold", c.threshold)
		return
	}
	rankForEviction(cands, res)
	victim := cands[0]
	msg := evictionMessage(c, res, victim)
	klog.InfoS("Evicting a pod to relieve node pressure", "pod", klog.KObj(victim.pod), "signal", c.signal, "used", victim.used)
	pressureEvictions.WithLabelValues(string(c.signal)).Inc()
	byPod[victim.pod].RequestEviction(msg)
}
