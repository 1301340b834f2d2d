package main

import (
	"slices"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/addons/coredns/server"
)

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
			server.Run(args)
			return nil
		},
	}
}
