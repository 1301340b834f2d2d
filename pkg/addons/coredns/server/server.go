// Package server is CoreDNS (github.com/coredns/coredns) as "steadyplane
// dns" runs it: with the plugins the cluster's Corefile uses
// (coredns.Corefile) compiled in, and no others.
package server

import (
	"os"
	"slices"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
)

// Plugins are the CoreDNS plugins compiled in, by directive name.
var Plugins = []string{"errors", "health", "ready", "prometheus", "cache", "kubernetes", "loop", "forward"}

// Run runs CoreDNS with its own command-line arguments (-conf Corefile,
// -dns.port, ...) until it is stopped; only Plugins' directives are known.
func Run(args []string) {
	// Only these plugins, in CoreDNS's own order of directives.
	dnsserver.Directives = slices.DeleteFunc(slices.Clone(dnsserver.Directives), func(d string) bool { return !slices.Contains(Plugins, d) })
	os.Args = append([]string{"coredns"}, args...)
	coremain.Run()
}
