package main

import (
	"os"
	"slices"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	"github.com/spf13/cobra"

	// The plugins the cluster's Corefile uses (clusterdns.Corefile), and
	// no others.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
)

// dnsPlugins are the CoreDNS plugins compiled in, by directive name.
var dnsPlugins = []string{"errors", "health", "ready", "prometheus", "cache", "kubernetes", "loop", "forward"}

// newDNSCommand is CoreDNS (github.com/coredns/coredns) with the plugins a
// cluster's DNS needs: its own flags (-conf, -dns.port, -plugins, ...) as
// CoreDNS documents them.
func newDNSCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "dns -conf Corefile",
		Short: "Run CoreDNS, the cluster's DNS (plugins kubernetes, forward, cache, errors, health, ready, loop, prometheus)",
		Long: `Run CoreDNS as the cluster's DNS server. "up" runs it as the Deployment kube-system/coredns
behind the kube-dns Service, from an image of this binary, with the Corefile of the
ConfigMap kube-system/coredns. Its flags are CoreDNS's own (single dash):

  -conf string      Corefile to load
  -dns.port string  default port (53)
  -plugins          list the plugins compiled in
  -quiet            no initialization output
  -version          show CoreDNS's version`,
		Example:            `  steadyplane dns -conf /etc/coredns/Corefile`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "-help" }) {
				return cmd.Help()
			}
			// Only these plugins, in CoreDNS's own order of directives.
			dnsserver.Directives = slices.DeleteFunc(slices.Clone(dnsserver.Directives), func(d string) bool { return !slices.Contains(dnsPlugins, d) })
			os.Args = append([]string{"coredns"}, args...)
			coremain.Run()
			return nil
		},
	}
}
