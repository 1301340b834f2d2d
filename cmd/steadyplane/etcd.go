package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/steadyplane/steadyplane/pkg/etcd"
)

func newEtcdCommand() *cobra.Command {
	o := etcd.NewOptions()
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run an etcd member (go.etcd.io/etcd/server/v3/embed)",
		Long: `Run one etcd member in this process. Flags carry etcd's own names. Give
--cert-file/--key-file/--trusted-ca-file to serve clients over TLS with client-certificate
authentication, and the peer-* equivalents for member-to-member traffic.`,
		Example: `  # one of three members
  steadyplane etcd --name m1 --data-dir /var/lib/sp/m1 \
    --listen-client-urls https://10.0.0.1:2379 --listen-peer-urls https://10.0.0.1:2380 \
    --initial-advertise-peer-urls https://10.0.0.1:2380 \
    --initial-cluster m1=https://10.0.0.1:2380,m2=https://10.0.0.2:2380,m3=https://10.0.0.3:2380 \
    --cert-file etcd.crt --key-file etcd.key --trusted-ca-file etcd-ca.crt \
    --peer-cert-file etcd.crt --peer-key-file etcd.key --peer-trusted-ca-file etcd-ca.crt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			return etcd.Run(ctx, o, func(e *embed.Etcd) {
				fmt.Fprintf(cmd.OutOrStdout(), "etcd ready: member %s serving clients on %v\n", o.Name, o.ListenClientURLs)
			})
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
