// Command altsvc measures client-side HA (KEP-3037) on a real control plane:
// three API servers on test hosts (network namespaces; needs root and
// iproute2) over a three-member etcd cluster, and a client-go client given the
// first one plus the alternative-services option.
//
// It prints the failover time, from the moment the API server in use is lost
// to the client's next answered GET, over --kills losses of each kind:
//   - refused: the server is killed with SIGKILL (its host answers with a reset);
//   - black-holed: the server's host vanishes (packets are dropped, nothing answers).
//
// It also prints the cost of the round tripper per GET against the same real
// server, plain client-go and with the option, in alternating rounds (ratio).
//
//	sudo go run ./bench/altsvc [--kills 20] [--rounds 7] [--gets 300]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/internal/testenv"
	clientaltsvc "github.com/steadyplane/steadyplane/pkg/client/altsvc"
)

func main() {
	kills := flag.Int("kills", 20, "losses of the serving API server per kind")
	rounds := flag.Int("rounds", 7, "alternating rounds for the overhead figure")
	gets := flag.Int("gets", 300, "GETs per round")
	flag.Parse()
	klog.LogToStderr(false) // the client's switch logs would drown the figures
	if err := run(*kills, *rounds, *gets); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(kills, rounds, gets int) error {
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
	pool, err := clientaltsvc.Enable(cfg, clientaltsvc.Options{})
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

	for _, kind := range []string{"refused", "black-holed"} {
		var took []time.Duration
		for k := 0; k < kills && ctx.Err() == nil; k++ {
			idx := hostIndex(c, pool.Current())
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
				err := get(rctx)
				cancel()
				if err == nil {
					break
				}
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
			fmt.Printf("failover, %s: median %v, worst %v, best %v (%d losses)\n", kind,
				took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), took[0].Round(time.Millisecond), len(took))
		}
	}

	// Overhead: the same server, plain client-go and with the option.
	plainCfg := c.AdminConfig(0)
	plainCfg.QPS, plainCfg.Burst = 1000, 1000
	optCfg := c.AdminConfig(0)
	optCfg.QPS, optCfg.Burst = 1000, 1000
	if _, err := clientaltsvc.Enable(optCfg, clientaltsvc.Options{Hosts: []string{c.Host(0)}}); err != nil {
		return err
	}
	clients := []*kubernetes.Clientset{kubernetes.NewForConfigOrDie(plainCfg), kubernetes.NewForConfigOrDie(optCfg)}
	per := [2][]time.Duration{}
	for r := 0; r < rounds && ctx.Err() == nil; r++ {
		for i, cl := range clients {
			t0 := time.Now()
			for g := 0; g < gets; g++ {
				if _, err := cl.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
					return err
				}
			}
			per[i] = append(per[i], time.Since(t0)/time.Duration(gets))
		}
	}
	for i := range per {
		slices.Sort(per[i])
	}
	if len(per[0]) > 0 {
		p, o := per[0][len(per[0])/2], per[1][len(per[1])/2]
		fmt.Printf("per GET, median of %d rounds: client-go %v, with the option %v, ratio %.2f\n", rounds, p.Round(time.Microsecond), o.Round(time.Microsecond), float64(o)/float64(p))
	}
	return nil
}

func hostIndex(c *testenv.HACluster, host string) int {
	for i := range c.APIServers {
		if c.Host(i) == host {
			return i
		}
	}
	return -1
}
