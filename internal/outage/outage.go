// Package outage measures how long an API server does not answer: the
// end-to-end tests log it per bad rollout, bench/fallback reports it.
package outage

import (
	"context"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// probeInterval is how often /readyz is asked: the resolution of the result.
const probeInterval = 100 * time.Millisecond

// Watch probes cfg's /readyz every 100ms from now on (TLS verified, the
// config's identity). The returned function waits (at most 30s more) for the
// API server to answer again after a failed probe and returns the time
// from the first failed probe to the first good one after it: 0 if none
// failed, the time so far if it has not come back.
func Watch(ctx context.Context, cfg *rest.Config) func() time.Duration {
	c := rest.CopyConfig(cfg)
	c.Timeout = time.Second
	client, err := rest.HTTPClientFor(c)
	if err != nil {
		return func() time.Duration { return 0 }
	}
	ctx, cancel := context.WithCancel(ctx)
	result := make(chan time.Duration, 1)
	go func() {
		var down time.Time
		for ctx.Err() == nil {
			ok := false
			if req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Host+"/readyz", nil); err == nil {
				if resp, err := client.Do(req); err == nil {
					ok = resp.StatusCode == http.StatusOK
					resp.Body.Close()
				}
			}
			switch {
			case !ok && down.IsZero():
				down = time.Now()
			case ok && !down.IsZero():
				result <- time.Since(down)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(probeInterval):
			}
		}
		if down.IsZero() {
			result <- 0
		} else {
			result <- time.Since(down)
		}
	}()
	return func() time.Duration {
		defer cancel()
		select {
		case d := <-result:
			return d.Round(probeInterval)
		case <-time.After(30 * time.Second):
			cancel()
			return (<-result).Round(probeInterval)
		}
	}
}
