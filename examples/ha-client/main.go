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

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
)

func main() {
	kubeconfig := flag.String("kubeconfig", ".steadyplane/admin.kubeconfig", "kubeconfig of the cluster")
	var hosts stringList
	flag.Var(&hosts, "alternative-host", "an API server to use besides the kubeconfig's (repeatable); others are learned from Alt-Svc")
	interval := flag.Duration("interval", time.Second, "time between reads")
	count := flag.Int("count", 0, "stop after this many reads (0: until Ctrl-C)")
	flag.Parse()

	// Both client options, and the API servers the kubeconfig lists in its
	// steadyplane.io/alternative-services extension.
	cfg, pool, err := clientconfig.Load(*kubeconfig, clientconfig.Options{AltSvc: altsvcclient.Options{Hosts: hosts}})
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

func serving(p *altsvcclient.Pool, configured string) string {
	if c := p.Current(); c != "" {
		return c
	}
	return configured
}

func blocked(p *altsvcclient.Pool) string {
	var out []string
	for _, h := range p.Hosts() {
		switch h.State {
		case altsvcclient.StateRejected:
			out = append(out, h.Host+" (certificate, for good)")
		case altsvcclient.StateUnreachable, altsvcclient.StateInitializing:
			out = append(out, fmt.Sprintf("%s (%s until %s)", h.Host, h.State, h.BlockedUntil.Format("15:04:05")))
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
