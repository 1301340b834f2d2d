// Command ifready measures what the KEP-3028 filter costs a real API server:
// it starts one etcd and two kube-apiservers on loopback, one with
// --startup-send-retry-after-if-not-initialized and one without, and drives
// the same request load through both in alternating rounds, so that the
// machine's noise falls on both alike. It prints requests per second for each
// round and the ratio of the medians (filter on / filter off).
//
//	go run ./bench/ifready [--rounds 5] [--duration 3s] [--concurrency 8]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/controlplane"
	"github.com/steadyplane/steadyplane/pkg/ifready"
)

func main() {
	rounds := flag.Int("rounds", 5, "rounds per server")
	duration := flag.Duration("duration", 3*time.Second, "length of one round")
	concurrency := flag.Int("concurrency", 8, "concurrent clients")
	flag.Parse()
	if err := run(*rounds, *duration, *concurrency); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(rounds int, duration time.Duration, concurrency int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Println("building steadyplane and starting etcd + apiserver (filter on)...")
	cp, stopCluster, err := testenv.StartTempControlPlane(ctx, nil)
	if err != nil {
		return err
	}
	defer stopCluster()

	ports, err := testenv.FreePorts(1)
	if err != nil {
		return err
	}
	fmt.Println("starting a second apiserver on the same etcd (filter off)...")
	off := &controlplane.Process{
		Name: "apiserver-filter-off", Binary: cp.APIServer.Binary, LogPath: filepath.Join(cp.DataDir(), "logs", "apiserver-off.log"),
		Args: append(slices.Clone(cp.APIServer.Args), "--secure-port="+strconv.Itoa(ports[0]), "--startup-send-retry-after-if-not-initialized=false"),
	}
	if err := off.Start(); err != nil {
		return err
	}
	defer off.Stop(20 * time.Second)

	admin, err := cp.AdminConfig()
	if err != nil {
		return err
	}
	onURL := cp.APIServerURL()
	offURL := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	client, err := rest.HTTPClientFor(admin)
	if err != nil {
		return err
	}
	if err := waitOK(ctx, client, offURL+"/readyz"); err != nil {
		return fmt.Errorf("second apiserver: %w\n%s", err, off.LogTail(10))
	}
	// Both servers answer the opted-in request normally; only the filter differs.
	path := "/api/v1/namespaces/default"
	if err := waitOK(ctx, client, onURL+path); err != nil {
		return err
	}

	fmt.Printf("warming up, then %d rounds of %v per server, %d concurrent clients, GET %s with %s\n", rounds, duration, concurrency, path, ifready.HeaderIfReady)
	measure(ctx, client, onURL+path, duration, concurrency)
	measure(ctx, client, offURL+path, duration, concurrency)
	var on, offRates []float64
	for r := 1; r <= rounds; r++ {
		a := measure(ctx, client, onURL+path, duration, concurrency)
		b := measure(ctx, client, offURL+path, duration, concurrency)
		on, offRates = append(on, a), append(offRates, b)
		fmt.Printf("round %d: filter on %8.0f req/s   filter off %8.0f req/s   ratio %.3f\n", r, a, b, a/b)
	}
	mOn, mOff := median(on), median(offRates)
	fmt.Printf("median: filter on %.0f req/s, filter off %.0f req/s, on/off throughput ratio %.3f\n", mOn, mOff, mOn/mOff)
	return nil
}

// measure sends requests from concurrency goroutines for d and returns the
// rate of successful ones.
func measure(ctx context.Context, client *http.Client, url string, d time.Duration, concurrency int) float64 {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				req.Header[ifready.HeaderIfReady] = []string{""}
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 && ctx.Err() == nil {
		fmt.Printf("  (%d failed requests to %s)\n", n, url)
	}
	return float64(ok.Load()) / time.Since(start).Seconds()
}

func waitOK(ctx context.Context, client *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not OK: %w", url, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
