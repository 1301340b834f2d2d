// Command etcd is the conformance runner's stand-in for the suite's etcd
// image (registry.k8s.io/etcd), which the aggregator test runs beside the
// sample API server as its storage: a member of etcd's own server
// (pkg/etcd, go.etcd.io/etcd/server/v3/embed) under etcd's flag names,
// plain HTTP unless given certificates, its data in <name>.etcd in the
// working directory unless --data-dir says otherwise. It is "steadyplane
// etcd" without the rest of the binary: the image stays small, and the
// test runs it by etcd's path with no subcommand.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/steadyplane/steadyplane/pkg/etcd"
)

func main() {
	o := etcd.NewOptions()
	fs := pflag.NewFlagSet("etcd", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := etcd.Run(ctx, o, nil); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
}
