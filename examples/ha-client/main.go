// Command ha-client is a client-go program that survives the loss of the API
// server it was given: it enables steadyplane's alternative-services option
// and then reads the cluster in a loop, printing which API server answered
// and which ones are blocked.
//
//	go run ./examples/ha-client --kubeconfig .steadyplane/admin.kubeconfig
//	go run ./examples/ha-client --kubeconfig k.conf --alternative-host 10.0.0.3:6443
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/pkg/client/altsvc"
)

func main() {
	kubeconfig := flag.String("kubeconfig", ".steadyplane/admin.kubeconfig", "kubeconfig of the cluster")
	var hosts stringList
	flag.Var(&hosts, "alternative-host", "an API server to use besides the kubeconfig's (repeatable); others are learned from Alt-Svc")
	interval := flag.Duration("interval", time.Second, "time between reads")
	count := flag.Int("count", 0, "stop after this many reads (0: until Ctrl-C)")
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	pool, err := altsvc.Enable(cfg, altsvc.Options{Hosts: hosts})
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	failures := 0
	for i := 1; *count == 0 || i <= *count; i++ {
		start := time.Now()
		ns, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			failures++
			fmt.Printf("%4d  error after %v: %v\n", i, time.Since(start).Round(time.Millisecond), err)
		} else {
			fmt.Printf("%4d  %d namespaces from %s in %v%s\n", i, len(ns.Items), serving(pool, cfg.Host), time.Since(start).Round(time.Millisecond), blocked(pool))
		}
		select {
		case <-ctx.Done():
		case <-time.After(*interval):
		}
	}
	if failures > 0 {
		os.Exit(1)
	}
}

func serving(p *altsvc.Pool, configured string) string {
	if c := p.Current(); c != "" {
		return c
	}
	return configured
}

func blocked(p *altsvc.Pool) string {
	var out []string
	for _, h := range p.Hosts() {
		if h.BlockedForever {
			out = append(out, h.Host+" (certificate, for good)")
		} else if !h.BlockedUntil.IsZero() {
			out = append(out, fmt.Sprintf("%s (until %s)", h.Host, h.BlockedUntil.Format("15:04:05")))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; blocked: " + strings.Join(out, ", ")
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
