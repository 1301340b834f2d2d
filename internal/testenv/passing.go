package testenv

import (
	"context"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PassingSampler counts, every 100ms, the pods of a Deployment that are not
// terminating and answer GET :8080/ on their address from outside, as a load
// balancer's health check would, and keeps the lowest count seen once
// replicas pods passed (the rollout's start).
type PassingSampler struct {
	mu      sync.Mutex
	steady  bool // replicas pods passed once: the rollout's start
	min     int
	samples int
}

// Run samples the pods of ns matching selector until ctx ends.
func (s *PassingSampler) Run(ctx context.Context, cs kubernetes.Interface, ns, selector string, replicas int) {
	client := &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	patient := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			continue
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		passing := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
				continue
			}
			wg.Add(1)
			go func(ip string) {
				defer wg.Done()
				// A second try, with more time, for a check that timed out:
				// on a busy machine the sampler itself stalls (a pod that
				// stopped serving refuses at once, twice).
				for _, c := range []*http.Client{client, patient} {
					resp, err := c.Get("http://" + ip + ":8080/")
					if err != nil {
						continue
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						mu.Lock()
						passing++
						mu.Unlock()
					}
					return
				}
			}(p.Status.PodIP)
		}
		wg.Wait()
		s.mu.Lock()
		if !s.steady && passing >= replicas {
			s.steady, s.min = true, passing
		}
		if s.steady {
			s.samples++
			s.min = min(s.min, passing)
		}
		s.mu.Unlock()
	}
}

// Result is the lowest count of passing pods and the number of samples.
func (s *PassingSampler) Result() (minimum, samples int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.min, s.samples
}
