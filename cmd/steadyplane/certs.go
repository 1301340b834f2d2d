package main

import (
	"fmt"
	"net"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

func newCertsCommand() *cobra.Command {
	var (
		dir                string
		apiserverIPs       []net.IP
		apiserverDNS       []string
		etcdIPs            []net.IP
		kubeconfigServer   string
		kubeconfigFilePath string
		alternatives       []string
	)
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Create or renew the control plane's certificates and admin kubeconfig",
		Long: `Create, or reuse and renew, the CA, etcd CA, serving and client certificates, the
service-account key pair and an admin kubeconfig in a directory, as "up" does. Useful
to prepare several API servers or etcd members by hand: give every address they serve on.
Existing CAs and keys are never replaced.`,
		Example: `  steadyplane certs --dir ./pki --apiserver-ip 10.0.0.1,10.0.0.2 --etcd-ip 10.0.0.1,10.0.0.2 \
    --kubeconfig-server https://10.0.0.1:6443 \
    --alternative-services 10.0.0.1:6443,10.0.0.2:6443`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			store := &pki.Store{Dir: dir, Logf: func(f string, a ...any) { fmt.Fprintf(out, f+"\n", a...) }}
			c, err := store.EnsureCluster(pki.ClusterConfig{APIServerIPs: apiserverIPs, APIServerDNSNames: apiserverDNS, EtcdIPs: etcdIPs})
			if err != nil {
				return err
			}
			path := kubeconfigFilePath
			if path == "" {
				path = filepath.Join(dir, "admin.kubeconfig")
			}
			if err := clientconfig.WriteKubeconfig(path, kubeconfigServer, "admin", c.CA, c.Admin, alternatives); err != nil {
				return err
			}
			fmt.Fprintf(out, "certificates in %s; admin kubeconfig %s\n", dir, path)
			return nil
		},
	}
	cmd.AddCommand(newCertsCheckExpirationCommand())
	fs := cmd.Flags()
	fs.StringVar(&dir, "dir", ".steadyplane/pki", "Directory of the certificates and keys.")
	fs.IPSliceVar(&apiserverIPs, "apiserver-ip", nil, "Addresses the API server serving certificate must carry (127.0.0.1 is always added).")
	fs.StringSliceVar(&apiserverDNS, "apiserver-dns", nil, "Extra DNS names for the API server serving certificate (the kubernetes.default names are always added).")
	fs.IPSliceVar(&etcdIPs, "etcd-ip", nil, "Addresses the etcd serving certificate must carry (127.0.0.1 is always added).")
	fs.StringVar(&kubeconfigServer, "kubeconfig-server", "https://127.0.0.1:6443", "Server URL written into the admin kubeconfig.")
	fs.StringSliceVar(&alternatives, "alternative-services", nil, "API servers (host:port) written into the kubeconfig's steadyplane.io/alternative-services extension, so that \"steadyplane kubectl\" and steadyplane's components fail over between them from the first request.")
	fs.StringVar(&kubeconfigFilePath, "kubeconfig", "", "Where to write the admin kubeconfig; defaults to <dir>/admin.kubeconfig.")
	return cmd
}

func newCertsCheckExpirationCommand() *cobra.Command {
	dir := ".steadyplane"
	cmd := &cobra.Command{
		Use:   "check-expiration",
		Short: "Show every certificate of a server or worker, when it expires and what renews it",
		Long: `Show every certificate in a server's data directory (pki/) or a worker's root directory
(bootstrap/), soonest to expire first: its subject, issuer, expiry, the time left, and what
renews it.`,
		Example: `  steadyplane certs check-expiration
  steadyplane certs check-expiration --data-dir /var/lib/steadyplane/node   # a worker`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := pki.ExpiriesOfDir(dir)
			if err != nil {
				return err
			}
			now := time.Now()
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "CERTIFICATE\tSUBJECT\tISSUER\tEXPIRES\tLEFT\tRENEWED BY")
			for _, e := range all {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", filepath.Base(e.File), e.Subject, e.Issuer, e.NotAfter.UTC().Format(time.RFC3339), e.Left(now), e.RenewedBy)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&dir, "data-dir", dir, "A server's data directory, or a worker's --root-dir.")
	return cmd
}
