// Command altsvc measures client-side HA (KEP-3037) on a real control plane:
// three API servers on test hosts (network namespaces; needs root and
// iproute2) over a three-member etcd cluster, and a client-go client given the
// first one plus the alternative-services option.
//
// It prints the failover time, from the moment the API server in use is lost
// to the client's next answered GET, over --kills losses of each kind:
//   - refused: the server is killed with SIGKILL (its host answers with a reset);
//   - black-holed: the server's host vanishes (packets are dropped, nothing answers);
//   - black-holed, writes: the same, measured with creates instead of GETs; a
//     write in flight on the lost connection fails (sending it again could
//     duplicate it), and the figure counts those failures.
//
// It also prints the throughput of GETs against the same real server, plain
// client-go and with the option, in alternating rounds (ratio), and how 30
// clients whose configured server is down (a load balancer that is gone),
// each given the three servers as a kubeconfig would list them, spread over
// them (requests per server, max/min).
//
//	sudo go run ./bench/altsvc [--kills 20] [--rounds 7] [--gets 300] [--clients 30]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/internal/testenv"
	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
)

func main() {
	kills := flag.Int("kills", 20, "losses of the serving API server per kind")
	rounds := flag.Int("rounds", 7, "alternating rounds for the overhead figure")
	gets := flag.Int("gets", 300, "GETs per round")
	clients := flag.Int("clients", 30, "clients for the spread figure")
	flag.Parse()
	klog.LogToStderr(false) // the client's switch logs would drown the figures
	if err := run(*kills, *rounds, *gets, *clients); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(kills, rounds, gets, spreadClients int) error {
	if err := testenv.CanMakeNetwork(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := os.MkdirTemp("", "steadyplane-bench-altsvc-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Println("starting three etcd members and three API servers on test hosts...")
	start := time.Now()
	c, err := testenv.StartHACluster(ctx, dir, 3, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("cluster ready in %.1fs\n", time.Since(start).Seconds())

	cfg := c.AdminConfig(0)
	cfg.QPS, cfg.Burst = 1000, 1000
	pool, err := altsvcclient.Enable(cfg, altsvcclient.Options{})
	if err != nil {
		return err
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	get := func(ctx context.Context) error {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	}
	// Learn the alternatives.
	deadline := time.Now().Add(time.Minute)
	for len(pool.Hosts()) < 3 {
		if err := get(ctx); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the client learned %d hosts, want 3", len(pool.Hosts()))
		}
		time.Sleep(200 * time.Millisecond)
	}

	var written int
	create := func(ctx context.Context) error {
		written++
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), written)}}, metav1.CreateOptions{})
		return err
	}
	for _, kind := range []string{"refused", "black-holed", "black-holed, writes"} {
		op := get
		if kind == "black-holed, writes" {
			op = create
		}
		var took []time.Duration
		failed := 0
		for k := 0; k < kills && ctx.Err() == nil; k++ {
			idx := c.Index(pool.Current())
			if idx < 0 {
				return fmt.Errorf("the client uses %q, not one of the cluster's hosts", pool.Current())
			}
			if kind == "refused" {
				c.KillAPIServer(idx)
			} else if err := c.Net.BlackHole(idx); err != nil {
				return err
			}
			lost := time.Now()
			for i := 0; ; i++ {
				rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				err := op(rctx)
				cancel()
				if err == nil {
					break
				}
				failed++
				if i > 100 || ctx.Err() != nil {
					return fmt.Errorf("no answer after losing %s: %v", c.Host(idx), err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			took = append(took, time.Since(lost))
			fmt.Printf("  %s %2d: node%d lost, answered by %s after %v\n", kind, k+1, idx, pool.Current(), took[len(took)-1].Round(time.Millisecond))
			if kind == "refused" {
				if err := c.RestartAPIServer(ctx, idx); err != nil {
					return err
				}
			} else if err := c.Net.Restore(idx); err != nil {
				return err
			}
		}
		slices.Sort(took)
		if len(took) > 0 {
			fmt.Printf("failover, %s: median %v, worst %v, best %v (%d losses, %d failed requests)\n", kind,
				took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), took[0].Round(time.Millisecond), len(took), failed)
		}
	}

	if err := throughput(ctx, c, rounds, gets); err != nil {
		return err
	}
	return spread(ctx, c, spreadClients)
}

// throughput prints GETs per second to one server from 8 concurrent
// goroutines, plain client-go and with the option, in alternating rounds.
func throughput(ctx context.Context, c *testenv.HACluster, rounds, gets int) error {
	plainCfg := c.AdminConfig(0)
	plainCfg.QPS, plainCfg.Burst = -1, 0 // no client-side rate limit: measure the transport
	optCfg := c.AdminConfig(0)
	optCfg.QPS, optCfg.Burst = -1, 0
	if _, err := altsvcclient.Enable(optCfg, altsvcclient.Options{Hosts: []string{c.Host(0), c.Host(1), c.Host(2)}}); err != nil {
		return err
	}
	clients := []*kubernetes.Clientset{kubernetes.NewForConfigOrDie(plainCfg), kubernetes.NewForConfigOrDie(optCfg)}
	const workers = 8
	rps := [2][]float64{}
	for r := 0; r < rounds && ctx.Err() == nil; r++ {
		for i, cl := range clients {
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			t0 := time.Now()
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for g := 0; g < gets/workers; g++ {
						if _, err := cl.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				return err
			}
			rps[i] = append(rps[i], float64(gets/workers*workers)/time.Since(t0).Seconds())
		}
	}
	for i := range rps {
		slices.Sort(rps[i])
	}
	if len(rps[0]) > 0 {
		p, o := rps[0][len(rps[0])/2], rps[1][len(rps[1])/2]
		fmt.Printf("GETs per second (%d goroutines), median of %d rounds: client-go %.0f, with the option %.0f, ratio %.2f\n", workers, len(rps[0]), p, o, o/p)
	}
	return nil
}

// spread starts n clients whose configured server is an address where
// nothing listens (the test's own bridge address), each with the three
// servers as alternatives, sends each 20 GETs, and prints where they went.
func spread(ctx context.Context, c *testenv.HACluster, n int) error {
	gone := net.JoinHostPort(c.Net.Gateway().String(), strconv.Itoa(testenv.HAPort))
	hosts := []string{c.Host(0), c.Host(1), c.Host(2)}
	perServer := map[string]int{}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		cfg := c.AdminConfig(0)
		cfg.Host = "https://" + gone
		pool, err := altsvcclient.Enable(cfg, altsvcclient.Options{Hosts: hosts})
		if err != nil {
			return err
		}
		cs := kubernetes.NewForConfigOrDie(cfg)
		for g := 0; g < 20; g++ {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return fmt.Errorf("client %d: %w", i, err)
			}
			perServer[pool.Current()]++
		}
	}
	counts := make([]int, 0, len(hosts))
	line := ""
	for i, h := range hosts {
		counts = append(counts, perServer[h])
		line += fmt.Sprintf(" node%d %d,", i, perServer[h])
	}
	lo, hi := slices.Min(counts), slices.Max(counts)
	ratio := "inf"
	if lo > 0 {
		ratio = fmt.Sprintf("%.2f", float64(hi)/float64(lo))
	}
	fmt.Printf("spread of %d clients (configured server gone, 20 GETs each): requests per server%s max/min %s\n", n, strings.TrimSuffix(line, ","), ratio)
	return nil
}
